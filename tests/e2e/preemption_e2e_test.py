"""Preemption end to end over loopback: plateaud with
--preemption_priority_gap, plateau-worker agents and the plateau CLI,
training small specs for real on the CPU backend.

- A low-priority job runs on every device; a job of higher priority by the
  gap is submitted. The victim's ranks checkpoint at the next step boundary
  and stop, it is requeued without using a restart, the urgent job runs,
  and the victim resumes from the checkpoint its stop wrote, ending with
  the same final loss as an uninterrupted run. Both histories say who
  preempted whom. Prints the time from the urgent job's submit to its start
  and the steps the victim lost (docs/BENCHMARKS.md, "Scheduling policy").
- An operator drains a node with --preempt: its job checkpoints, moves to
  the other node and ends with the same final loss.

Usage (Bazel runs it, see BUILD):
  preemption_e2e_test.py PLATEAUD PLATEAU_WORKER PLATEAU
"""

import calendar
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
from loopback import wait_until  # noqa: E402
import service_e2e_test as service  # noqa: E402
import synthetic_corpus  # noqa: E402

STEPS = 150
GAP = 100


def with_priority(name, priority):
    """write_spec's `replace` for a spec named `name` of `priority`."""
    return [(f"name: {name}\n", f"name: {name}\npriority: {priority}\n")]


def seconds(timestamp):
    """A protobuf JSON timestamp ("2026-12-04T06:01:02.345Z") in seconds."""
    whole, _, fraction = timestamp.rstrip("Z").partition(".")
    return (calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) +
            (float("0." + fraction) if fraction else 0.0))


class PreemptionEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        service.DATA = synthetic_corpus.prepare_data(service.WORKER, cls.root)
        cls.reference = None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def cluster(self, name, workers):
        cluster = service.Cluster(
            self.root, name, workers,
            daemon_flags=[f"--preemption_priority_gap={GAP}"])
        self.addCleanup(cluster.stop)
        return cluster

    def reference_loss(self, cluster):
        """The final loss of the spec run without interruption (once)."""
        if PreemptionEndToEndTest.reference is None:
            job_id = cluster.submit(cluster.write_spec("reference",
                                                       steps=STEPS))
            job = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
            PreemptionEndToEndTest.reference = service.final_loss(job)
        return PreemptionEndToEndTest.reference

    def assert_resumed_where_it_stopped(self, cluster, job_id):
        """The preempted attempt stopped after step N with a checkpoint
        there, and the next resumed after step N: no step lost. Returns
        N."""
        logs = cluster.cli("logs", job_id).stdout
        stopped = re.findall(
            r"rank 0\] plateau-worker train: stopped after step (\d+); "
            r"checkpoint at", logs)
        resumed = re.findall(
            r"rank 0\] resume: continuing after step (\d+) from", logs)
        self.assertEqual(len(stopped), 1, logs)
        self.assertEqual(len(resumed), 1, logs)
        self.assertEqual(resumed[0], stopped[0])
        self.assertIn(
            f"stopped for preemption; requeued without using a restart (0 of "
            f"2 used), resuming from step {stopped[0]}", logs)
        return int(stopped[0])

    def test_a_job_of_higher_priority_preempts_and_the_victim_loses_no_step(
            self):
        cluster = self.cluster("priority", [("node-a", 2)])
        reference = self.reference_loss(cluster)
        victim = cluster.submit(cluster.write_spec(
            "victim", steps=STEPS, replace=with_priority("victim", 10)))
        cluster.wait_for_checkpoint(victim, 40)
        # Within the gap: it waits.
        near = cluster.submit(cluster.write_spec(
            "near", steps=5, replace=with_priority("near", 10 + GAP - 1)))
        time.sleep(2)
        self.assertEqual(cluster.describe(victim)["state"],
                         "JOB_STATE_RUNNING")
        cluster.cli("cancel", near)

        urgent = cluster.submit(cluster.write_spec(
            "urgent", steps=10, replace=with_priority("urgent", 10 + GAP)))
        started = cluster.wait_for_state(
            urgent, ["JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"])
        start_seconds = (seconds(started["attempt_start_time"]) -
                         seconds(started["submit_time"]))
        cluster.wait_for_state(urgent, ["JOB_STATE_SUCCEEDED"])
        done = cluster.wait_for_state(victim, ["JOB_STATE_SUCCEEDED"])
        self.assertEqual(done.get("restarts", 0), 0, done)
        self.assertEqual(done.get("preemptions"), 1, done)
        self.assertEqual(done.get("attempt"), 2, done)
        self.assertEqual(service.final_loss(done), reference)
        stopped_step = self.assert_resumed_where_it_stopped(cluster, victim)
        self.assertGreaterEqual(stopped_step, 40)
        self.assertIn(f"PREEMPTED: attempt 1 preempted: job {urgent} "
                      f"(priority {10 + GAP}, user local) needs 2 devices",
                      cluster.cli("logs", victim).stdout)
        self.assertIn(f"PREEMPTING: preempting job {victim}: ",
                      cluster.cli("logs", urgent).stdout)
        print(f"preemption: the urgent job started {start_seconds:.2f} s "
              f"after its submit; the victim stopped after step "
              f"{stopped_step}, resumed after step {stopped_step}: 0 steps "
              f"lost; final loss {service.final_loss(done)} (uninterrupted: "
              f"{reference})")

    def test_a_drain_with_preempt_moves_the_job_with_its_progress(self):
        cluster = self.cluster("drain", [("node-a", 2), ("node-b", 2)])
        reference = self.reference_loss(cluster)
        job_id = cluster.submit(cluster.write_spec("moved", steps=STEPS))
        job = cluster.wait_for_checkpoint(job_id, 40)
        node = job["allocation"]["nodes"][0]["node"]
        other = "node-b" if node == "node-a" else "node-a"
        drained = cluster.cli("nodes", "drain", node, "--preempt", "--reason",
                              "firmware")
        self.assertEqual(drained.stdout, f"{node}: DRAINING (firmware)\n")
        moved = wait_until(
            lambda: (lambda job: job if job.get("attempt") == 2 and job.get(
                "allocation") else None)(cluster.describe(job_id)),
            60, f"{job_id} to be placed again\n{cluster.logs()}")
        self.assertEqual(moved["allocation"]["nodes"][0]["node"], other)
        done = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        self.assertEqual(done.get("restarts", 0), 0, done)
        self.assertEqual(service.final_loss(done), reference)
        self.assert_resumed_where_it_stopped(cluster, job_id)
        self.assertIn(f"preempted: node {node} is draining (firmware)",
                      cluster.cli("logs", job_id).stdout)
        refused = cluster.cli("nodes", "resume", node, "--preempt",
                              check=False)
        self.assertEqual(refused.returncode, 2, refused.stderr)


if __name__ == "__main__":
    service.PLATEAUD = os.path.abspath(sys.argv.pop(1))
    service.WORKER = os.path.abspath(sys.argv.pop(1))
    service.CLI = os.path.abspath(sys.argv.pop(1))
    junit.main()
