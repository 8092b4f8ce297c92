"""What the end-to-end tests see of a job's rank processes and its run
directory: the live ranks of each attempt (from /proc, so it also sees ranks
in other network namespaces), a watch that records whether two attempts
ever had live ranks at once, and a check of every complete checkpoint
against its manifest."""

import hashlib
import json
import os
import re
import threading
import time
import zlib


def rank_processes(job_id):
    """Pids of live `plateau-worker train` processes of the job."""
    return [pid for pid, _ in rank_attempts(job_id)]


def rank_attempts(job_id):
    """(pid, attempt) of each live `plateau-worker train` process of the
    job; attempt 0 for a rank without --attempt."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as file:
                zombie = file.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if (zombie or len(argv) <= 2 or argv[1] != b"train" or
                f"/{job_id}-".encode() not in argv[2]):
            continue
        attempt = 0
        for argument in argv:
            match = re.fullmatch(rb"--attempt=(\d+)", argument)
            if match:
                attempt = int(match.group(1))
        found.append((int(entry), attempt))
    return found


def rank_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as file:
        match = re.search(rb"(?:^|\0)PLATEAU_RANK=(\d+)\0", file.read())
    return int(match.group(1))


class AttemptWatch:
    """Samples the job's live ranks every `interval` seconds from a thread
    of its own, until stop(): `overlaps` lists the samples in which ranks
    of two attempts were alive at once, `first_seen`/`last_seen` the
    monotonic times each attempt had live ranks."""

    def __init__(self, job_id, interval=0.05):
        self.job_id = job_id
        self.interval = interval
        self.overlaps = []
        self.first_seen = {}
        self.last_seen = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.is_set():
            now = time.monotonic()
            attempts = sorted({attempt for _, attempt in
                               rank_attempts(self.job_id)})
            for attempt in attempts:
                self.first_seen.setdefault(attempt, now)
                self.last_seen[attempt] = now
            if len(attempts) > 1:
                self.overlaps.append((now, attempts))
            time.sleep(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join()


def verify_checkpoints(run_dir):
    """The steps of the complete checkpoints in run_dir/checkpoints, after
    checking each one's files against its MANIFEST.json (size, SHA-256
    where listed, and version 2's block CRC-32s); AssertionError naming a
    damaged one."""
    checkpoints = os.path.join(run_dir, "checkpoints")
    steps = []
    for name in sorted(os.listdir(checkpoints)):
        manifest_path = os.path.join(checkpoints, name, "MANIFEST.json")
        if name.startswith(".") or not os.path.exists(manifest_path):
            continue
        with open(manifest_path) as file:
            manifest = json.load(file)
        assert name == f"step-{manifest['step']:08d}", (name, manifest)
        files = {}
        for listed in manifest["files"]:
            with open(os.path.join(checkpoints, name, listed["name"]),
                      "rb") as file:
                data = file.read()
            files[listed["name"]] = data
            assert len(data) == listed["bytes"], (name, listed)
            if "sha256" in listed:
                assert hashlib.sha256(data).hexdigest() == listed["sha256"], (
                    name, listed)
        block = manifest.get("block_bytes", 0)
        for part in ("weights", "optimizer_state"):
            for tensor, entry in manifest.get(part, {}).items():
                for chunk in entry["chunks"]:
                    data = files[chunk["file"]]
                    first = chunk["offset"]
                    end = first + 4 * (chunk["end"] - chunk["begin"])
                    for index, crc in enumerate(chunk["crc32"]):
                        begin = first + index * block
                        assert zlib.crc32(
                            data[begin:min(begin + block, end)]) == crc, (
                                name, tensor, chunk["file"], index)
        steps.append(manifest["step"])
    return steps


def check_replaced_cleanly(test, watch, logs, old_node, checkpointed,
                           run_dir, steps, old_node_log):
    """What the fencing tests require once a job whose attempt 1 lost touch
    with plateaud (on old_node) has succeeded as attempt 2: ranks of two
    attempts never alive at once; attempt 2 placed off old_node and resumed
    from a checkpoint at least `checkpointed`; every checkpoint whole, the
    last step's among them; FENCE naming attempt 2; and old_node's agent,
    back in touch, told its attempt is stale (waited for)."""
    test.assertEqual(watch.overlaps, [])
    test.assertGreater(watch.first_seen[2], watch.last_seen[1])
    scheduled = re.search(r"SCHEDULED: attempt 2 on (.*)", logs)
    test.assertIsNotNone(scheduled, logs)
    test.assertNotIn(old_node + "[", scheduled.group(1))
    resumed = re.search(r"resume: continuing after step (\d+)", logs)
    test.assertIsNotNone(resumed, logs)
    test.assertGreaterEqual(int(resumed.group(1)), checkpointed)
    test.assertIn(steps, verify_checkpoints(run_dir))
    with open(os.path.join(run_dir, "FENCE")) as file:
        test.assertEqual(file.read(), "attempt 2\n")
    deadline = time.monotonic() + 60
    while not re.search(r"attempt\(s\) re-reported, [1-9]\d* stale",
                        open(old_node_log).read()):
        test.assertLess(time.monotonic(), deadline,
                        f"{old_node} never re-attached to be told its "
                        f"attempt is stale")
        time.sleep(0.2)
