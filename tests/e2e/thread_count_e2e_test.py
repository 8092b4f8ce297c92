"""A run does not depend on its thread count: a job requeued onto a node
with other cores trains with another number of kernel threads, and its
losses, weights and optimizer state stay bitwise the same, in bf16 and
fp32. Its products are cut into pieces by their size alone (2 to 8 here),
never by the threads, and a bf16 product's rows have the same bits in any
piece (kernels/cpu/fixed_order_gemm.h where oneDNN has no bf16 kernel).

BUILD runs it twice: at the CPU's SIMD level, and held at AVX2
(thread_count_e2e_test_avx2), whose OpenBLAS Haswell kernels sum a row by
where it falls among a call's rows.

Usage (Bazel runs it, see BUILD): thread_count_e2e_test.py PLATEAU_WORKER
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
import synthetic_corpus  # noqa: E402

WORKER = None

# Wider than train_e2e_test's model, so that its products are cut into
# pieces.
SPEC = """\
name: threads
model: {{layers: 2, d_model: 256, heads: 4, experts: 4, top_k: 2,
        ffn_hidden: 512, vocab: 320, seq_len: 64}}
optimizer: {{kind: adamw, lr: 1.0e-2, warmup_steps: 5, grad_clip: 1.0}}
data: {{path: {data}, batch_tokens: 2048}}
train: {{steps: 3, checkpoint_every: 10, eval_every: 10, seed: 7}}
precision: {precision}
"""


class ThreadCountTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = synthetic_corpus.prepare_data(WORKER, cls.root,
                                                 documents=300, seed=1)

    def train(self, precision, threads):
        """The run's losses and its final checkpoint's files' digests."""
        name = f"{precision}-{threads}"
        spec = os.path.join(self.root, name + ".yaml")
        with open(spec, "w") as file:
            file.write(SPEC.format(data=self.data, precision=precision))
        run_dir = os.path.join(self.root, name)
        summary_path = run_dir + ".summary.json"
        result = subprocess.run(
            [WORKER, "train", spec, f"--run_dir={run_dir}",
             f"--summary_json={summary_path}", f"--threads={threads}"],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(summary_path) as file:
            losses = json.load(file)["losses"]
        checkpoints = os.path.join(run_dir, "checkpoints")
        last = os.path.join(checkpoints, sorted(os.listdir(checkpoints))[-1])
        digests = {}
        for name in os.listdir(last):
            if not name.endswith(".safetensors"):
                continue
            with open(os.path.join(last, name), "rb") as file:
                digests[name] = hashlib.sha256(file.read()).hexdigest()
        return losses, digests

    def test_the_thread_count_does_not_change_the_run(self):
        for precision in ("bf16", "fp32"):
            one_thread = self.train(precision, 1)
            for threads in (2, 3):
                with self.subTest(precision=precision, threads=threads):
                    self.assertEqual(self.train(precision, threads),
                                     one_thread)


if __name__ == "__main__":
    WORKER = os.path.abspath(sys.argv.pop(1))
    junit.main()
