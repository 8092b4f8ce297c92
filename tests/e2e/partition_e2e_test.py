"""A real network partition: plateaud and three workers, each in a network
namespace of its own that this test creates, joined by veth links to a
bridge in a fifth namespace. A job spans two of the workers (one rank each,
Gloo between them over the links). The link of the node running rank 0 is
cut mid-run and restored later.

Required: the cut-off node's rank stops itself within its lease, before
plateaud's node timeout requeues the job, so two attempts never have live
ranks at once; the job resumes from its newest checkpoint on the two other
workers and ends with the same final loss as an uninterrupted run; every
checkpoint is whole; and the node, once back, is told its attempt is stale.

Needs root (network namespaces); Bazel runs it unsandboxed (see BUILD).

Usage: partition_e2e_test.py PLATEAUD PLATEAU_WORKER PLATEAU
"""

import os
import re
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
from cluster_queries import ClusterQueries  # noqa: E402
from loopback import wait_until  # noqa: E402
from ranks import (AttemptWatch, check_replaced_cleanly,  # noqa: E402
                   rank_attempts, rank_of, rank_processes)
import synthetic_corpus  # noqa: E402

PLATEAUD = None
WORKER = None
CLI = None

NODE_TIMEOUT_SECONDS = 4
HEARTBEAT_SECONDS = 0.5
LEASE_SECONDS = NODE_TIMEOUT_SECONDS * 3 / 4  # plateaud's default
GRACE_SECONDS = 3
SUBNET = "10.77.0"
PORT = 7070

SPEC = """\
name: {name}
resources: {{nodes: 2, devices_per_node: 1}}
model: {{layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,
        ffn_hidden: 128, vocab: 320, seq_len: 64}}
parallel: {{ep: 2, pp: 1, dp: 1}}
optimizer: {{kind: adamw, lr: 1.0e-2, warmup_steps: 2}}
data: {{path: {data}, batch_tokens: 1024}}
train: {{steps: {steps}, checkpoint_every: 20, eval_every: 0, seed: 7,
        max_restarts: 2}}
"""


def run(*command):
    subprocess.run(command, check=True, capture_output=True, timeout=30)


def namespaces_usable():
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    return None


class Network:
    """Namespaces <prefix>-sw (a bridge) and one per host, each host's eth0
    linked to the bridge by a veth whose bridge end is v<host>."""

    def __init__(self, prefix, hosts):
        self.prefix = prefix
        self.switch = f"{prefix}-sw"
        self.addresses = {}
        self.created = []
        run("ip", "netns", "add", self.switch)
        self.created.append(self.switch)
        run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for index, host in enumerate(hosts):
            namespace = self.namespace(host)
            run("ip", "netns", "add", namespace)
            self.created.append(namespace)
            run("ip", "-n", self.switch, "link", "add", self.port(host),
                "type", "veth", "peer", "name", "eth0", "netns", namespace)
            run("ip", "-n", self.switch, "link", "set", self.port(host),
                "master", "br0", "up")
            address = f"{SUBNET}.{index + 1}"
            run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev",
                "eth0")
            run("ip", "-n", namespace, "link", "set", "eth0", "up")
            run("ip", "-n", namespace, "link", "set", "lo", "up")
            self.addresses[host] = address

    def namespace(self, host):
        return f"{self.prefix}-{host}"

    def port(self, host):
        return f"v{host}"

    def exec(self, host):
        return ["ip", "netns", "exec", self.namespace(host)]

    def cut(self, host):
        run("ip", "-n", self.switch, "link", "set", self.port(host), "down")

    def restore(self, host):
        run("ip", "-n", self.switch, "link", "set", self.port(host), "up")

    def delete(self):
        for namespace in reversed(self.created):
            subprocess.run(["ip", "netns", "del", namespace],
                           capture_output=True)


class PartitionTest(ClusterQueries, unittest.TestCase):

    def setUp(self):
        why = namespaces_usable()
        if why:
            self.skipTest(why)
        self.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.data = synthetic_corpus.prepare_data(WORKER, self.root)
        self.work = os.path.join(self.root, "work")  # every node shares it
        self.network = Network(f"pl{os.getpid() % 100000}",
                               ["d", "a", "b", "c"])
        self.addCleanup(self.network.delete)
        self.processes = {}
        self.addCleanup(self.stop_processes)
        self.address = f"{self.network.addresses['d']}:{PORT}"
        self.start("plateaud", "d", [
            PLATEAUD, f"--listen={self.address}",
            f"--metrics_listen={self.network.addresses['d']}:0",
            f"--data_dir={os.path.join(self.root, 'plateaud-data')}",
            f"--read_roots={self.data}",
            f"--node_timeout={NODE_TIMEOUT_SECONDS}s",
            f"--heartbeat_interval={HEARTBEAT_SECONDS}s",
            f"--stop_grace_period={GRACE_SECONDS}s",
            # Off loopback without tokens, inside the test's own network.
            "--insecure_no_auth"])
        wait_until(lambda: self.cli("ls", check=False).returncode == 0, 30,
                   "plateaud to answer")
        for host in ("a", "b", "c"):
            self.start(f"node-{host}", host, [
                WORKER, f"--coordinator={self.address}", f"--name=node-{host}",
                "--devices=cpu:1", "--device_memory=1GiB",
                f"--metrics_listen={self.network.addresses[host]}:0",
                f"--work_dir={self.work}", "--threads=1"])
        wait_until(lambda: len(self.nodes()) == 3, 30, "the workers to attach")

    def start(self, name, host, command):
        log = open(os.path.join(self.root, name + ".log"), "ab")
        self.processes[name] = subprocess.Popen(
            self.network.exec(host) + command, stdout=log,
            stderr=subprocess.STDOUT)
        log.close()

    def stop_processes(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=GRACE_SECONDS + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def cli(self, *args, check=True):
        result = subprocess.run(
            self.network.exec("d") + [CLI, f"--coordinator={self.address}",
                                      *args],
            capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"plateau {' '.join(args)} exited "
                                 f"{result.returncode}:\n{result.stderr}\n"
                                 f"{self.logs()}")
        return result

    def submit(self, name, steps):
        path = os.path.join(self.root, name + ".yaml")
        with open(path, "w") as file:
            file.write(SPEC.format(name=name, data=self.data, steps=steps))
        match = re.search(r"\b(j-[0-9a-z]+)\b", self.cli("submit", path).stdout)
        return match.group(1)

    def wait_for(self, job_id, condition, what, timeout=180):
        return wait_until(
            lambda: (lambda job: job if condition(job) else None)(
                self.describe(job_id)),
            timeout, f"{job_id}: {what}\n{self.logs()}")

    def test_a_cut_off_node_stops_before_its_job_moves(self):
        steps = 160
        reference = self.submit("reference", steps)
        reference = self.wait_for(
            reference, lambda job: job["state"] == "JOB_STATE_SUCCEEDED",
            "the reference run to succeed")

        job_id = self.submit("partitioned", steps)
        watch = AttemptWatch(job_id)
        self.addCleanup(watch.stop)
        job = self.wait_for(job_id, lambda job: int(job.get("progress", {}).get(
            "checkpoint_step", 0)) >= 40, "a checkpoint at step 40")
        checkpointed = int(job["progress"]["checkpoint_step"])
        allocation = {entry["node"]: int(entry.get("first_rank", 0))
                      for entry in job["allocation"]["nodes"]}
        # The node of rank 0, the one that writes checkpoints.
        cut = [node for node, rank in allocation.items() if rank == 0][0]
        host = cut.split("-")[1]
        old_ranks = [pid for pid, attempt in rank_attempts(job_id)
                     if attempt == 1]
        self.assertEqual(len(old_ranks), 2)
        cut_rank = [pid for pid in old_ranks if rank_of(pid) == 0][0]
        self.network.cut(host)
        cut_at = time.monotonic()
        try:
            wait_until(lambda: cut_rank not in rank_processes(job_id),
                       LEASE_SECONDS + 2, "the cut-off rank to stop")
            stopped_after = time.monotonic() - cut_at
            wait_until(lambda: 2 in watch.first_seen, 60,
                       f"attempt 2's ranks\n{self.logs()}")
            moved_after = watch.first_seen[2] - cut_at
            wait_until(lambda: int(self.describe(job_id).get(
                "progress", {}).get("step", 0)) > checkpointed + 10, 60,
                "attempt 2 to train")
        finally:
            self.network.restore(host)
        job = self.wait_for(
            job_id, lambda job: job["state"] == "JOB_STATE_SUCCEEDED",
            "the partitioned run to succeed")
        watch.stop()

        # The cut-off rank gone within the lease, well before plateaud gave
        # up on its node.
        self.assertLess(stopped_after, LEASE_SECONDS + 0.5)
        # plateaud last heard the node at most a heartbeat before the cut.
        self.assertGreaterEqual(moved_after,
                                NODE_TIMEOUT_SECONDS - HEARTBEAT_SECONDS)
        self.assertEqual(job.get("attempt"), 2, job)
        self.assertEqual(job["progress"]["loss"],
                         reference["progress"]["loss"])
        check_replaced_cleanly(
            self, watch, self.cli("logs", job_id).stdout, cut, checkpointed,
            os.path.join(self.work, "runs", job_id), steps,
            os.path.join(self.root, cut + ".log"))
        with open(os.path.join(self.root, cut + ".log")) as file:
            self.assertIn("its lease expired", file.read())
        print(f"partition: the cut-off rank stopped {stopped_after:.2f} s "
              f"after the cut, the other attempt-1 rank "
              f"{watch.last_seen[1] - cut_at:.2f} s after it, attempt 2 ran "
              f"{moved_after:.2f} s after it (lease {LEASE_SECONDS} s, node "
              f"timeout {NODE_TIMEOUT_SECONDS} s)")


if __name__ == "__main__":
    PLATEAUD = os.path.abspath(sys.argv.pop(1))
    WORKER = os.path.abspath(sys.argv.pop(1))
    CLI = os.path.abspath(sys.argv.pop(1))
    junit.main()
