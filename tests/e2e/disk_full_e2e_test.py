"""A real full disk under training: the run directory is a small tmpfs
(in a mount namespace this test creates), filled up mid-run so that a
checkpoint write meets ENOSPC.

Required: training fails with an error that names the checkpoint, the run
directory and the cause; every checkpoint left is whole (none that looks
complete fails its manifest's SHA-256), and no half-written one is left
behind; once space is back, --resume continues from the newest intact
checkpoint and ends with the same final loss as an uninterrupted run.

Needs root (a mount namespace and tmpfs); Bazel runs it unsandboxed (see
BUILD).

Usage: disk_full_e2e_test.py PLATEAU_WORKER
"""

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
from loopback import wait_until  # noqa: E402
from ranks import verify_checkpoints  # noqa: E402
import synthetic_corpus  # noqa: E402

WORKER = None

SPEC = """\
name: disk-full
resources: {{nodes: 1, devices_per_node: 1}}
model: {{layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,
        ffn_hidden: 128, vocab: 320, seq_len: 64}}
parallel: {{ep: 1, pp: 1, dp: 1}}
optimizer: {{kind: adamw, lr: 1.0e-2, warmup_steps: 2}}
data: {{path: {data}, batch_tokens: 1024}}
train: {{steps: {steps}, checkpoint_every: 20, eval_every: 0, seed: 7}}
"""
STEPS = 120
CLONE_NEWNS = 0x00020000


def private_mount_namespace():
    """Moves this process (and its children to be) into a mount namespace
    of its own, where mounts reach no one else."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)


def fill(directory):
    """Writes zeros into directory/filler until the file system is full;
    returns the filler's path."""
    path = os.path.join(directory, "filler")
    block = bytes(1 << 16)
    with open(path, "wb", buffering=0) as file:
        try:
            while True:
                file.write(block)
        except OSError:
            pass
    return path


@unittest.skipUnless(os.geteuid() == 0, "needs root for a mount namespace")
class DiskFullEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        private_mount_namespace()
        cls.disk = os.path.join(cls.root, "disk")
        os.makedirs(cls.disk)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs",
                        cls.disk], check=True)
        cls.data = synthetic_corpus.prepare_data(WORKER, cls.root)
        cls.spec = os.path.join(cls.root, "spec.yaml")
        with open(cls.spec, "w") as file:
            file.write(SPEC.format(data=cls.data, steps=STEPS))

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["umount", cls.disk], check=False)
        shutil.rmtree(cls.root, ignore_errors=True)

    def train(self, run_dir, *flags):
        summary = os.path.join(self.root,
                               os.path.basename(run_dir) + ".summary.json")
        process = subprocess.Popen(
            [WORKER, "train", self.spec, "--world=1", f"--run_dir={run_dir}",
             f"--summary_json={summary}", "--threads=1", "--log_every=1",
             *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        return process, summary

    def test_a_full_disk_fails_the_checkpoint_and_loses_nothing(self):
        reference, reference_summary = self.train(
            os.path.join(self.root, "reference"))
        output, _ = reference.communicate(timeout=600)
        self.assertEqual(reference.returncode, 0, output)
        with open(reference_summary) as file:
            reference_loss = json.load(file)["losses"][-1]

        run_dir = os.path.join(self.disk, "run")
        training, summary = self.train(run_dir)
        checkpoints = os.path.join(run_dir, "checkpoints")
        wait_until(lambda: os.path.exists(
            os.path.join(checkpoints, "step-00000040", "MANIFEST.json")),
            300, "the checkpoint of step 40")
        # Stopped while the disk fills, so that the next write meets it.
        training.send_signal(signal.SIGSTOP)
        filler = fill(self.disk)
        filled_at = time.monotonic()
        training.send_signal(signal.SIGCONT)
        output, _ = training.communicate(timeout=600)
        failed_after = time.monotonic() - filled_at
        self.assertNotEqual(training.returncode, 0, output)
        self.assertRegex(output, r"cannot write checkpoint of step \d+ in " +
                         run_dir)
        self.assertIn("No space left on device", output)
        steps = verify_checkpoints(run_dir)
        self.assertIn(40, steps)
        self.assertEqual([name for name in os.listdir(checkpoints)
                          if name.startswith(".")], [],
                         "a half-written checkpoint was left behind")

        # Space back: the run goes on from its newest intact checkpoint.
        os.remove(filler)
        freed_at = time.monotonic()
        resumed, summary = self.train(run_dir, "--resume")
        output, _ = resumed.communicate(timeout=600)
        finished_after = time.monotonic() - freed_at
        self.assertEqual(resumed.returncode, 0, output)
        self.assertIn(f"resume: continuing after step {max(steps)} from",
                      output)
        with open(summary) as file:
            self.assertEqual(json.load(file)["losses"][-1], reference_loss)
        self.assertEqual(verify_checkpoints(run_dir)[-1], STEPS)
        print(f"disk full: training failed {failed_after:.2f} s after the "
              f"disk filled, checkpoints {steps} intact; resumed after step "
              f"{max(steps)}, it ended {finished_after:.2f} s after space "
              f"was freed, with the reference's final loss")


if __name__ == "__main__":
    WORKER = os.path.abspath(sys.argv.pop(1))
    junit.main()
