"""The whole service end to end over loopback: plateaud, plateau-worker
agents and the plateau CLI, training small specs for real on the CPU
backend, through the failures a shared cluster sees.

- A job spanning two workers succeeds; the workers' /metrics show every
  memory component's peak per rank, and the job's tokens, loss, step, expert
  load and optimizer state; `describe`, `ls`, `logs` and `nodes` show it.
- A worker SIGKILLed mid-run, and a rank SIGKILLed mid-run: the attempt ends,
  the job is requeued and resumes from its latest checkpoint on the capacity
  left, and ends with the same final loss as an uninterrupted run. With the
  newest checkpoint damaged first, it resumes from the newest intact one.
- An elastic job (resources.min_nodes 1 of 2) whose second node is
  SIGKILLed resumes on the node left at dp 1, within ELASTIC_LOSS_TOLERANCE
  of the run that kept dp 2; describe lists both attempts' layouts.
- A worker agent frozen (SIGSTOP) past the node timeout: its ranks stop
  themselves when their lease runs out, before the job is requeued on the
  other node, so two attempts never train at once; the job ends with the
  same final loss, every checkpoint whole.
- An operator drains a node (`plateau nodes drain NODE --reason`): it takes
  no new work and says why; resumed, it runs the job that waited.
- plateaud SIGKILLed mid-run and restarted: the job is re-adopted and
  finishes; no job is lost.
- A cancel mid-run: CANCELLED, and no rank process is left after the grace
  period.
- A malformed spec: non-zero exit and one line per bad field; a job that
  fails makes `submit --watch` exit non-zero.
- With auth on, the user, the worker and its ranks each use their own
  token, and a caller without one is refused. With TLS, a worker without a
  token attaches, and its ranks rendezvous, by the client certificate the
  CA signed for it. No party sends or takes a token in plaintext off
  loopback unless told to, and a token is never a flag.
- Admission plans memory: a job too big for the workers' devices is refused
  at submit, naming the component that binds; a `schedules: auto` spec gets
  its schedules chosen, shown by `describe`, and trains; `plateau plan`
  prints the plan (table and JSON) with or without plateaud.
- deploy/examples/qwen-like-moe.yaml (GQA, QK-norm, sigmoid routing with
  bias balancing, a shared expert) trains in the quickstart's cluster.
- A job with `init_from` starts from another job's checkpoint exported to
  the Hugging Face layout.

Usage (Bazel runs it, see BUILD):
  service_e2e_test.py PLATEAUD PLATEAU_WORKER PLATEAU EXAMPLE_SPEC \
      QWEN_LIKE_EXAMPLE_SPEC
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
from cluster_queries import ClusterQueries  # noqa: E402
from loopback import free_port, wait_until  # noqa: E402
from ranks import (AttemptWatch, check_replaced_cleanly,  # noqa: E402
                   rank_of, rank_processes)
import synthetic_corpus  # noqa: E402

PLATEAUD = None
WORKER = None
CLI = None
EXAMPLE = None
QWEN_LIKE_EXAMPLE = None

# Two ranks (ep = 2) of a small MoE; a step takes tens of milliseconds, so a
# run of a few hundred steps leaves time to break it in the middle.
SPEC = """\
name: {name}
resources: {{nodes: {nodes}, devices_per_node: {devices_per_node}}}
model: {{layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,
        ffn_hidden: 128, vocab: 320, seq_len: 64}}
parallel: {{ep: 2, pp: 1, dp: 1}}
schedules: {{{schedules}}}
optimizer: {{kind: adamw, lr: 1.0e-2, warmup_steps: 2}}
data: {{path: {data}, batch_tokens: 1024}}
train: {{steps: {steps}, checkpoint_every: {checkpoint_every}, eval_every: 0,
        seed: 7, max_restarts: {max_restarts}}}
"""

# Every schedule, so that every memory component has a peak.
ALL_SCHEDULES = ("dispatch_chunk_tokens: 96, ring_dtp: true, sco: true, "
                 "optimizer_offload: stream")

COMPONENTS = ("weights", "gradients", "optimizer", "dispatch",
              "vocab_projection", "checkpoint", "attention", "activations",
              "staging", "snapshot", "other")

GRACE_SECONDS = 5
# How far, as a share of it, the final loss of 200 steps of SPEC (ep 2) may
# move when dp changes: the same batches, summed in another order. Measured
# on the CPU backend against dp 2 throughout: 5.0e-4 for a run that went
# from dp 2 to dp 1 at its checkpoint of step 40, 7.1e-4 for dp 1
# throughout.
ELASTIC_LOSS_TOLERANCE = 2e-3
# plateaud's default rank lease is 3/4 of it: 3 s, which a plateaud restart
# fits in.
NODE_TIMEOUT_SECONDS = 4
HEARTBEAT_SECONDS = 0.5
LEASE_SECONDS = NODE_TIMEOUT_SECONDS * 3 / 4


def scrape(address):
    """metric name -> list of (labels dict, value)."""
    with urllib.request.urlopen(f"http://{address}/metrics",
                                timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r"(\w+)(?:\{(.*)\})? (\S+)$", line)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        samples.setdefault(match.group(1), []).append(
            (labels, float(match.group(3))))
    return samples


class Cluster(ClusterQueries):
    """plateaud and workers on loopback, in a directory of their own."""

    def __init__(self, root, name, workers, auth=False,
                 device_memory="1GiB", tls=False, daemon_flags=(),
                 read_roots=None):
        """`daemon_flags`: more of plateaud's flags; `read_roots`: user ->
        the read roots the tokens file gives them (with auth)."""
        self.device_memory = device_memory
        self.daemon_flags = list(daemon_flags)
        self.root = os.path.join(root, name)
        os.makedirs(self.root)
        self.work = os.path.join(self.root, "work")
        # The corpus where plateaud lets jobs read by default: the work
        # directory's data/.
        shutil.copytree(DATA, os.path.join(self.work, CLUSTER_DATA))
        self.address = f"127.0.0.1:{free_port()}"
        self.daemon = None
        self.workers = {}
        # With TLS: plateaud's certificate, and a CA that signs one client
        # certificate per node, by which the nodes attach (no node tokens).
        self.tls = tls
        if tls:
            make_certificates(self.root, [worker for worker, _ in workers])
        # With auth: a tokens file of one user, one admin and one token per
        # node, each node's token in a file of its own (--token_file).
        self.tokens_file = None
        self.user_token = None
        self.admin_token = None
        if auth:
            self.user_token = "ada-" + os.urandom(8).hex()
            self.admin_token = "root-" + os.urandom(8).hex()
            roots = {user: f", read_roots: [{', '.join(directories)}]"
                     for user, directories in (read_roots or {}).items()}
            users = [
                f"  - {{name: ada, role: user, token_sha256: "
                f"{hashlib.sha256(self.user_token.encode()).hexdigest()}"
                f"{roots.get('ada', '')}}}",
                f"  - {{name: root, role: admin, token_sha256: "
                f"{hashlib.sha256(self.admin_token.encode()).hexdigest()}"
                f"{roots.get('root', '')}}}"]
            nodes = []
            for worker, _ in workers:
                if tls:
                    nodes.append(f"  - {{name: {worker}}}")
                    continue
                token = f"{worker}-" + os.urandom(8).hex()
                with open(os.path.join(self.root, worker + ".token"),
                          "w") as file:
                    file.write(token + "\n")
                nodes.append(f"  - {{name: {worker}, token_sha256: "
                             f"{hashlib.sha256(token.encode()).hexdigest()}}}")
            self.tokens_file = os.path.join(self.root, "tokens.yaml")
            with open(self.tokens_file, "w") as file:
                file.write("users:\n" + "\n".join(users) + "\nnodes:\n" +
                           "\n".join(nodes) + "\n")
        self.start_daemon()
        for worker, devices in workers:
            self.start_worker(worker, devices)
        wait_until(lambda: len(self.nodes()) == len(workers), 30,
                   "the workers to attach")

    def log(self, name):
        return open(os.path.join(self.root, name + ".log"), "ab")

    def start_daemon(self):
        self.daemon = subprocess.Popen(
            [PLATEAUD, f"--listen={self.address}",
             "--metrics_listen=127.0.0.1:0",
             f"--data_dir={os.path.join(self.root, 'plateaud-data')}",
             f"--node_timeout={NODE_TIMEOUT_SECONDS}s",
             f"--heartbeat_interval={HEARTBEAT_SECONDS}s",
             f"--stop_grace_period={GRACE_SECONDS}s"] + self.daemon_flags +
            ([f"--tokens_file={self.tokens_file}"] if self.tokens_file else
             []) +
            ([f"--tls_cert={self.certificate('plateaud.crt')}",
              f"--tls_key={self.certificate('plateaud.key')}",
              f"--tls_client_ca={self.certificate('ca.crt')}"] if self.tls
             else []),
            stdout=self.log("plateaud"), stderr=subprocess.STDOUT)
        wait_until(lambda: self.cli("ls", check=False).returncode == 0, 30,
                   "plateaud to answer")

    def start_worker(self, name, devices):
        self.workers[name] = subprocess.Popen(
            [WORKER, f"--coordinator={self.address}", f"--name={name}",
             f"--devices=cpu:{devices}",
             f"--device_memory={self.device_memory}",
             "--metrics_listen=127.0.0.1:0", f"--work_dir={self.work}",
             "--threads=1"] +
            ([f"--ca_cert={self.certificate('plateaud.crt')}",
              f"--client_cert={self.certificate(name + '.crt')}",
              f"--client_key={self.certificate(name + '.key')}"] if self.tls
             else
             [f"--token_file={os.path.join(self.root, name + '.token')}"]
             if self.tokens_file else []),
            stdout=self.log(name), stderr=subprocess.STDOUT)

    def certificate(self, name):
        return os.path.join(self.root, name)

    def cli(self, *args, check=True, timeout=120, token=True):
        """The CLI with the user's token in PLATEAU_TOKEN (never a flag)."""
        flags = [f"--coordinator={self.address}"]
        if self.tls:
            flags.append(f"--ca_cert={self.certificate('plateaud.crt')}")
        environment = dict(os.environ)
        environment.pop("PLATEAU_TOKEN", None)
        if token and self.user_token:
            environment["PLATEAU_TOKEN"] = self.user_token
        result = subprocess.run([CLI, *flags, *args],
                                capture_output=True, text=True,
                                timeout=timeout, env=environment)
        if check and result.returncode != 0:
            raise AssertionError(
                f"plateau {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}\n{self.logs()}")
        return result

    def write_spec(self, name, steps, nodes=1, devices_per_node=2,
                   schedules="", checkpoint_every=20, max_restarts=2,
                   data=None, replace=()):
        """`replace`: (old, new) pairs applied to the YAML text."""
        path = os.path.join(self.root, name + ".yaml")
        text = SPEC.format(
            name=name, nodes=nodes, devices_per_node=devices_per_node,
            schedules=schedules, data=data or CLUSTER_DATA, steps=steps,
            checkpoint_every=checkpoint_every, max_restarts=max_restarts)
        for old, new in replace:
            assert old in text, old
            text = text.replace(old, new)
        with open(path, "w") as file:
            file.write(text)
        return path

    def submit(self, spec_path):
        output = self.cli("submit", spec_path).stdout
        match = re.search(r"\b(j-[0-9a-z]+)\b", output)
        assert match, output
        return match.group(1)

    def wait_for_state(self, job_id, states, timeout=180):
        return wait_until(
            lambda: (lambda job: job if job.get("state") in states else None)(
                self.describe(job_id)),
            timeout, f"{job_id} to reach {states}\n{self.logs()}")

    def wait_for_checkpoint(self, job_id, step, timeout=120):
        return wait_until(
            lambda: (lambda job: job if int(job.get("progress", {}).get(
                "checkpoint_step", 0)) >= step else None)(
                    self.describe(job_id)),
            timeout, f"{job_id} to checkpoint step {step}\n{self.logs()}")

    def stop(self):
        for process in list(self.workers.values()) + [self.daemon]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in list(self.workers.values()) + [self.daemon]:
            if process is None:
                continue
            try:
                process.wait(timeout=GRACE_SECONDS + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def make_certificates(directory, nodes):
    """plateaud.crt/.key for 127.0.0.1, and ca.crt with NODE.crt/.key for
    each node (common name NODE), in `directory`."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True,
                       cwd=directory, timeout=60)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", "plateaud.key", "-out", "plateaud.crt")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=plateau-ca", "-keyout", "ca.key", "-out", "ca.crt")
    for node in nodes:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj",
                f"/CN={node}", "-keyout", f"{node}.key", "-out",
                f"{node}.csr")
        openssl("x509", "-req", "-days", "1", "-in", f"{node}.csr", "-CA",
                "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
                f"{node}.crt")


def final_loss(job):
    return job["progress"]["loss"]


DATA = None
# DATA as a Cluster's jobs name it: under its work directory's data/.
CLUSTER_DATA = "data/synthetic"


class ServiceEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        global DATA
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        DATA = synthetic_corpus.prepare_data(WORKER, cls.root)
        cls.clusters = []

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def cluster(self, name, workers=(("node-a", 2), ("node-b", 2)),
                auth=False, device_memory="1GiB", tls=False, read_roots=None,
                daemon_flags=()):
        cluster = Cluster(self.root, name, workers, auth, device_memory, tls,
                          daemon_flags=daemon_flags, read_roots=read_roots)
        self.addCleanup(cluster.stop)
        return cluster

    def test_a_job_on_two_workers_succeeds_with_live_metrics(self):
        cluster = self.cluster("two-workers")
        spec = cluster.write_spec("spread", steps=30, nodes=2,
                                  devices_per_node=1, schedules=ALL_SCHEDULES,
                                  checkpoint_every=10)
        watched = cluster.cli("submit", spec, "--watch")
        self.assertIn("SUCCEEDED", watched.stdout)
        self.assertNotIn("\r", watched.stdout)  # piped: plain lines
        job_id = re.search(r"\b(j-[0-9a-z]+)\b", watched.stdout).group(1)
        job = cluster.describe(job_id)
        self.assertEqual(job["state"], "JOB_STATE_SUCCEEDED")
        self.assertEqual(int(job["progress"]["step"]), 30)
        self.assertEqual(int(job["progress"]["checkpoint_step"]), 30)
        self.assertEqual(sorted(int(m.get("rank", 0)) for m in job["memory"]),
                         [0, 1])

        # Each worker's endpoint: every component of every rank it ran, with
        # a peak wherever this step allocates.
        nodes = {node["name"]: node for node in cluster.nodes()}
        self.assertEqual(sorted(nodes), ["node-a", "node-b"])
        peaks = {}
        job_level = []
        for node in nodes.values():
            samples = scrape(node["metrics_address"])
            for labels, value in samples["plateau_memory_peak_bytes"]:
                if labels["job"] == job_id:
                    peaks[(labels["rank"], labels["pool"],
                           labels["component"])] = value
            for labels, value in samples["plateau_device_memory_capacity_bytes"]:
                self.assertEqual(value, 1 << 30, labels)
            if any(labels["job"] == job_id for labels, _ in
                   samples.get("plateau_train_step", [])):
                job_level.append(samples)
        for rank in ("0", "1"):
            for pool in ("device", "host"):
                for component in COMPONENTS:
                    self.assertIn((rank, pool, component), peaks)
            for component in ("weights", "gradients", "dispatch",
                              "vocab_projection", "checkpoint", "attention",
                              "activations", "staging"):
                self.assertGreater(peaks[(rank, "device", component)], 0,
                                   f"rank {rank} {component}")
            # The offloaded optimizer and SCO's boundaries live on the host.
            self.assertGreater(peaks[(rank, "host", "optimizer")], 0)
            self.assertGreater(peaks[(rank, "host", "checkpoint")], 0)
        # Job-level series come from rank 0's node only.
        self.assertEqual(len(job_level), 1)
        samples = job_level[0]

        def value(name, **labels):
            found = [v for l, v in samples[name]
                     if l["job"] == job_id and
                     all(l.get(k) == str(x) for k, x in labels.items())]
            self.assertEqual(len(found), 1, (name, labels))
            return found[0]

        self.assertEqual(value("plateau_train_step"), 30)
        self.assertEqual(value("plateau_train_tokens_total"), 30 * 1024)
        self.assertGreater(value("plateau_train_tokens_per_second"), 0)
        self.assertAlmostEqual(value("plateau_train_loss"), final_loss(job),
                               places=4)
        for layer in (0, 1):
            routed = sum(value("plateau_expert_tokens_total", layer=layer,
                               expert=expert) for expert in range(4))
            self.assertEqual(routed, 30 * 1024 * 2)  # top 2
            self.assertGreaterEqual(
                value("plateau_expert_load_imbalance_ratio", layer=layer), 1)
        state = sum(v for l, v in samples["plateau_optimizer_state_bytes"]
                    if l["job"] == job_id)
        self.assertGreater(state, 0)

        # What a user looks at.
        described = cluster.cli("describe", job_id).stdout
        for text in (job_id, "SUCCEEDED", "dispatch", "vocab_projection"):
            self.assertIn(text, described)
        listed = cluster.cli("ls").stdout
        self.assertRegex(listed, rf"{job_id}\s+spread\s+\S+\s+SUCCEEDED")
        logs = cluster.cli("logs", job_id).stdout
        self.assertIn("step    30/30", logs)
        self.assertIn("checkpoint:", logs)
        self.assertIn("SCHEDULED: attempt 1 on node-a[0] node-b[0]", logs)
        # HEARTBEAT is when the node was last heard from (every half
        # second), not when it attached, seconds of training ago.
        self.assertRegex(cluster.cli("nodes").stdout,
                         r"(?m)^node-a\b.*\s[0-2]s\s")

    def test_failures_resume_from_the_checkpoint_with_the_same_loss(self):
        cluster = self.cluster("failures")
        steps = 200
        reference = cluster.submit(
            cluster.write_spec("reference", steps=steps))
        reference = cluster.wait_for_state(reference, ["JOB_STATE_SUCCEEDED"])

        # A node lost: its worker (and with it its ranks) SIGKILLed.
        job_id = cluster.submit(cluster.write_spec("node-lost", steps=steps))
        job = cluster.wait_for_checkpoint(job_id, 40)
        node = job["allocation"]["nodes"][0]["node"]
        cluster.workers[node].kill()
        cluster.workers[node].wait()
        wait_until(lambda: not rank_processes(job_id), 10,
                   "the lost node's ranks to die with it")
        job = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        self.assertEqual(job.get("restarts"), 1, job)
        self.assertEqual(final_loss(job), final_loss(reference))
        logs = cluster.cli("logs", job_id).stdout
        resumed = re.search(r"\[(node-\w) rank 0\] resume: continuing after "
                            r"step (\d+) from", logs)
        self.assertIsNotNone(resumed, logs)
        self.assertNotEqual(resumed.group(1), node)
        self.assertGreaterEqual(int(resumed.group(2)), 40)
        self.assertEqual(int(resumed.group(2)) % 20, 0)
        self.assertIn("REQUEUED", logs)

        # A rank crash on the node left: the attempt fails, the job resumes
        # there.
        job_id = cluster.submit(cluster.write_spec("rank-crash", steps=steps))
        cluster.wait_for_checkpoint(job_id, 40)
        ranks = rank_processes(job_id)
        self.assertEqual(len(ranks), 2)
        os.kill([pid for pid in ranks if rank_of(pid) == 1][0],
                signal.SIGKILL)
        job = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        self.assertEqual(job.get("restarts"), 1, job)
        self.assertEqual(final_loss(job), final_loss(reference))
        logs = cluster.cli("logs", job_id).stdout
        self.assertIn("rank 1 was killed by signal 9", logs)

        # A damaged newest checkpoint (a flipped byte in its weights, as a
        # bad disk leaves it) and then a crash: the next attempt passes over
        # it, resumes from the one before, and loses nothing else.
        job_id = cluster.submit(cluster.write_spec("damaged", steps=steps))
        cluster.wait_for_checkpoint(job_id, 60)
        ranks = rank_processes(job_id)
        for pid in ranks:  # no checkpoint is committed while we look
            os.kill(pid, signal.SIGSTOP)
        checkpoints = os.path.join(cluster.work, "runs", job_id,
                                   "checkpoints")
        newest = max(name for name in os.listdir(checkpoints)
                     if name.startswith("step-"))
        # Rank 0's last chunk of the weights, which it reads on resume.
        model = os.path.join(checkpoints, newest,
                             "model.rank-00000.safetensors")
        with open(model, "r+b") as file:
            file.seek(-5, os.SEEK_END)
            byte = file.read(1)
            file.seek(-5, os.SEEK_END)
            file.write(bytes([byte[0] ^ 0x40]))
        for pid in ranks:  # stopped mid-write, a rank must not finish it
            os.kill(pid, signal.SIGKILL)
        job = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        self.assertEqual(job.get("restarts"), 1, job)
        self.assertEqual(final_loss(job), final_loss(reference))
        logs = cluster.cli("logs", job_id).stdout
        self.assertRegex(
            logs, rf"resume: rank 0 passes over \S*{newest}: "
                  r"\S*model\.rank-00000\.safetensors: bytes \[\d+, \d+\) of "
                  r"\S+ \(its elements \[\d+, \d+\)\) fail their CRC-32")
        resumed = re.search(r"resume: continuing after step (\d+) from",
                            logs)
        self.assertIsNotNone(resumed, logs)
        self.assertEqual(int(resumed.group(1)), int(newest[5:]) - 20)

    def test_an_elastic_job_that_loses_a_node_resumes_on_fewer_devices(self):
        # ep 2 on up to 2 nodes of 2 devices (dp 2), or on 1 (dp 1). The
        # batch is the same 16 sequences at either size; each rank's share
        # of it differs, so the sums run in another order and the losses
        # agree to ELASTIC_LOSS_TOLERANCE, not bitwise.
        cluster = self.cluster("elastic")
        steps = 200
        fixed = ("parallel: {ep: 2, pp: 1, dp: 1}",
                 "parallel: {ep: 2, pp: 1}")
        reference = cluster.submit(cluster.write_spec(
            "elastic-reference", steps=steps, nodes=2, replace=[fixed]))
        reference = cluster.wait_for_state(reference, ["JOB_STATE_SUCCEEDED"])
        # The same spec at dp 1 throughout: what changing dp alone moves.
        on_one_node = cluster.wait_for_state(
            cluster.submit(cluster.write_spec(
                "elastic-on-one-node", steps=steps, nodes=1, replace=[fixed])),
            ["JOB_STATE_SUCCEEDED"])
        self.assertLessEqual(
            abs(final_loss(on_one_node) - final_loss(reference)),
            ELASTIC_LOSS_TOLERANCE * abs(final_loss(reference)),
            (final_loss(on_one_node), final_loss(reference)))
        self.assertEqual(reference["attempt_layouts"],
                         [{"first_attempt": 1, "last_attempt": 1, "nodes": 2,
                           "devices_per_node": 2, "ep": 2, "pp": 1,
                           "dp": 2}])

        spec = cluster.write_spec(
            "elastic", steps=steps, nodes=2,
            replace=[fixed, ("{nodes: 2,", "{nodes: 2, min_nodes: 1,")])
        job_id = cluster.submit(spec)
        job = cluster.wait_for_checkpoint(job_id, 40)
        self.assertEqual(len(job["allocation"]["nodes"]), 2)
        lost = job["allocation"]["nodes"][1]["node"]
        cluster.workers[lost].kill()
        cluster.workers[lost].wait()
        job = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        self.assertEqual(job.get("restarts"), 1, job)
        self.assertEqual(
            job["attempt_layouts"],
            [{"first_attempt": 1, "last_attempt": 1, "nodes": 2,
              "devices_per_node": 2, "ep": 2, "pp": 1, "dp": 2},
             {"first_attempt": 2, "last_attempt": 2, "nodes": 1,
              "devices_per_node": 2, "ep": 2, "pp": 1, "dp": 1}])
        self.assertLessEqual(
            abs(final_loss(job) - final_loss(reference)),
            ELASTIC_LOSS_TOLERANCE * abs(final_loss(reference)),
            (final_loss(job), final_loss(reference)))
        logs = cluster.cli("logs", job_id).stdout
        self.assertRegex(logs, r"SCHEDULED: attempt 2 on \S+\[0,1\]; "
                               r"elastic: 1 of 2 nodes, dp 1")
        resumed = re.search(r"resume: continuing after step (\d+) from",
                            logs)
        self.assertIsNotNone(resumed, logs)
        self.assertGreaterEqual(int(resumed.group(1)), 40)
        described = cluster.cli("describe", job_id).stdout
        self.assertRegex(described, r"Nodes:\s+1-2 \(elastic")
        self.assertRegex(described, r"(?m)^\s+1\s+2x2\s+ep 2 x pp 1 x dp 2$")
        self.assertRegex(described, r"(?m)^\s+2\s+1x2\s+ep 2 x pp 1 x dp 1$")

    def test_a_frozen_agent_cannot_train_beside_its_replacement(self):
        # The agent of the node running the job is frozen (SIGSTOP) past the
        # node timeout: its ranks must end themselves within the lease,
        # before plateaud requeues the job on the other node, and the job
        # must end as an uninterrupted run does.
        cluster = self.cluster("frozen-agent")
        steps = 150
        reference = cluster.submit(
            cluster.write_spec("reference", steps=steps))
        reference = cluster.wait_for_state(reference, ["JOB_STATE_SUCCEEDED"])
        job_id = cluster.submit(cluster.write_spec("frozen", steps=steps))
        watch = AttemptWatch(job_id)
        self.addCleanup(watch.stop)
        job = cluster.wait_for_checkpoint(job_id, 20)
        checkpointed = int(job["progress"]["checkpoint_step"])
        node = job["allocation"]["nodes"][0]["node"]
        agent = cluster.workers[node]
        old_ranks = rank_processes(job_id)
        self.assertEqual(len(old_ranks), 2)
        agent.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            wait_until(lambda: not any(pid in rank_processes(job_id)
                                       for pid in old_ranks),
                       LEASE_SECONDS + 2, "the frozen node's ranks to stop")
            stopped_after = time.monotonic() - frozen_at
            wait_until(lambda: cluster.describe(job_id).get("attempt") == 2,
                       60, "the job to be requeued")
            wait_until(lambda: 2 in watch.first_seen, 60,
                       "attempt 2's ranks")
            # Attempt 2 trains for a while before the old agent wakes.
            time.sleep(3)
        finally:
            agent.send_signal(signal.SIGCONT)
        job = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        watch.stop()
        self.assertLess(stopped_after, LEASE_SECONDS + 1, stopped_after)
        # plateaud last heard the node at most a heartbeat before the
        # freeze.
        self.assertGreaterEqual(watch.first_seen[2] - frozen_at,
                                NODE_TIMEOUT_SECONDS - HEARTBEAT_SECONDS)
        self.assertEqual(job.get("restarts"), 1, job)
        self.assertEqual(final_loss(job), final_loss(reference))
        check_replaced_cleanly(
            self, watch, cluster.cli("logs", job_id).stdout, node,
            checkpointed, os.path.join(cluster.work, "runs", job_id), steps,
            os.path.join(cluster.root, node + ".log"))
        print(f"frozen agent: its ranks stopped {stopped_after:.2f} s after "
              f"the freeze, attempt 2 ran "
              f"{watch.first_seen[2] - frozen_at:.2f} s after it")

    def test_plateaud_killed_mid_run_loses_nothing(self):
        cluster = self.cluster("daemon-restart", workers=(("node-a", 2),))
        reference = cluster.submit(cluster.write_spec("reference", steps=150))
        reference = cluster.wait_for_state(reference, ["JOB_STATE_SUCCEEDED"])
        # Each job takes the node's two devices: one runs, one waits.
        running = cluster.submit(cluster.write_spec("running", steps=150))
        waiting = cluster.submit(cluster.write_spec("waiting", steps=150))
        cluster.wait_for_checkpoint(running, 20)
        cluster.daemon.kill()
        cluster.daemon.wait()
        time.sleep(1)
        cluster.start_daemon()
        for job_id in (running, waiting):
            done = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
            self.assertEqual(final_loss(done), final_loss(reference))
        # The running attempt was re-adopted, not restarted.
        self.assertEqual(cluster.describe(running).get("attempt"), 1)
        self.assertIn("READOPTED", cluster.cli("logs", running).stdout)
        listed = json.loads(cluster.cli("ls", "-o", "json").stdout)["jobs"]
        self.assertEqual(len(listed), 3)

    def test_cancel_mid_run_leaves_no_rank(self):
        cluster = self.cluster("cancel", workers=(("node-a", 2),))
        watch = subprocess.Popen(
            [CLI, f"--coordinator={cluster.address}", "submit", "--watch",
             cluster.write_spec("long", steps=100000)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        job_id = re.search(r"\b(j-[0-9a-z]+)\b", watch.stdout.readline()).group(1)
        wait_until(lambda: int(cluster.describe(job_id).get(
            "progress", {}).get("step", 0)) > 0, 120, "the first step")
        self.assertEqual(len(rank_processes(job_id)), 2)
        cluster.cli("cancel", job_id)
        cancelled_at = time.monotonic()
        wait_until(lambda: not rank_processes(job_id), GRACE_SECONDS + 2,
                   "every rank to exit within the grace period")
        job = cluster.wait_for_state(job_id, ["JOB_STATE_CANCELLED"],
                                     timeout=GRACE_SECONDS + 15)
        self.assertLess(time.monotonic() - cancelled_at, GRACE_SECONDS + 15)
        self.assertEqual(job["state"], "JOB_STATE_CANCELLED")
        # The ranks stopped at a step boundary with a checkpoint there, so
        # a resubmission of the run loses nothing.
        stopped = re.search(r"rank 0\] plateau-worker train: stopped after "
                            r"step (\d+); checkpoint at (\S+)",
                            cluster.cli("logs", job_id).stdout)
        self.assertIsNotNone(stopped)
        self.assertEqual(int(job["progress"]["checkpoint_step"]),
                         int(stopped.group(1)))
        self.assertEqual(job["progress"]["checkpoint_location"],
                         stopped.group(2))
        # The watch of a cancelled job exits 4.
        output, _ = watch.communicate(timeout=30)
        self.assertEqual(watch.returncode, 4, output)
        self.assertIn("CANCELLED", output)

    def test_with_auth_every_party_uses_its_own_token(self):
        # The user submits with their token; the worker attaches, and its
        # ranks rendezvous, with the node's; a caller without a token is
        # turned away.
        cluster = self.cluster("auth", workers=(("node-a", 2),), auth=True)
        self.assertEqual([node["name"] for node in cluster.nodes()],
                         ["node-a"])
        watched = cluster.cli("submit", cluster.write_spec("authed", steps=10),
                              "--watch")
        self.assertIn("SUCCEEDED", watched.stdout)
        job_id = re.search(r"\b(j-[0-9a-z]+)\b", watched.stdout).group(1)
        self.assertEqual(cluster.describe(job_id)["owner"], "ada")
        # plateaud hashes a token read from stdin, not from its command
        # line.
        hashed = subprocess.run([PLATEAUD, "--hash_token"],
                                input=cluster.user_token + "\n",
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(hashed.returncode, 0, hashed.stderr)
        self.assertEqual(hashed.stdout, hashlib.sha256(
            cluster.user_token.encode()).hexdigest() + "\n")
        empty = subprocess.run([PLATEAUD, "--hash_token"], input="",
                               capture_output=True, text=True, timeout=30)
        self.assertEqual(empty.returncode, 2)
        self.assertIn("reads the token from stdin", empty.stderr)
        anonymous = cluster.cli("ls", check=False, token=False)
        self.assertEqual(anonymous.returncode, 1)
        self.assertIn("token", anonymous.stderr)
        # Draining is an admin's; ada is a user.
        refused = cluster.cli("nodes", "drain", "node-a", check=False)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("plateau: ada may not call this method", refused.stderr)

    def test_an_operator_drains_and_resumes_a_node(self):
        # A drained node takes no new work and says why, in `plateau nodes`
        # and its JSON; the job that waits is first in `plateau queue`;
        # resumed, the node runs it.
        cluster = self.cluster("drain", workers=(("node-a", 2),))
        drained = cluster.cli("nodes", "drain", "node-a", "--reason",
                              "new NIC")
        self.assertEqual(drained.stdout, "node-a: DRAINING (new NIC)\n")
        self.assertIn("DRAINING (new NIC)", cluster.cli("nodes").stdout)
        self.assertEqual(cluster.nodes()[0]["drain_reason"], "new NIC")
        job_id = cluster.submit(cluster.write_spec("drained", steps=6))
        # `plateau queue`: first in line, waiting for devices.
        queue = wait_until(
            lambda: (lambda text: text if re.search(
                rf"^1 +{job_id} +drained ", text, re.MULTILINE) else None)(
                    cluster.cli("queue").stdout),
            30, f"{job_id} to show first in plateau queue")
        self.assertTrue(queue.startswith("POS  ID"), queue)
        self.assertRegex(queue, rf"{job_id} +drained +\S+ +50 +1x2 +\S+ +"
                         r"never fits: needs 1 node with 2 devices")
        queued = json.loads(cluster.cli("queue", "-o", "json").stdout)
        self.assertEqual([job["id"] for job in queued["jobs"]], [job_id])
        self.assertEqual(queued["jobs"][0]["queue_position"], 1)
        self.assertEqual(cluster.describe(job_id)["state"], "JOB_STATE_QUEUED")
        resumed = cluster.cli("nodes", "resume", "node-a")
        self.assertEqual(resumed.stdout, "node-a: READY\n")
        self.assertEqual(cluster.nodes()[0]["drain_reason"], "")
        cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        unknown = cluster.cli("nodes", "drain", "node-z", check=False)
        self.assertEqual(unknown.returncode, 1)
        self.assertIn("no node node-z", unknown.stderr)

    def test_with_tls_a_worker_attaches_by_its_client_certificate(self):
        # The node has no token: it and its ranks present the certificate
        # the CA signed for it, and plateaud takes it for node-a.
        cluster = self.cluster("tls", workers=(("node-a", 2),), auth=True,
                               tls=True)
        self.assertEqual([node["name"] for node in cluster.nodes()],
                         ["node-a"])
        watched = cluster.cli("submit", cluster.write_spec("tls", steps=10),
                              "--watch")
        self.assertIn("SUCCEEDED", watched.stdout)
        # Without the CA certificate the CLI cannot reach plateaud.
        plain = subprocess.run(
            [CLI, f"--coordinator={cluster.address}", "ls"],
            capture_output=True, text=True, timeout=60,
            env=dict(os.environ, PLATEAU_TOKEN=cluster.user_token))
        self.assertEqual(plain.returncode, 1, plain.stdout)

    def test_tokens_never_travel_in_plaintext_off_loopback(self):
        # Each refusal comes before anything is sent: 192.0.2.1 (TEST-NET-1)
        # is never contacted.
        token_file = os.path.join(self.root, "refused.token")
        with open(token_file, "w") as file:
            file.write("secret\n")
        remote = "192.0.2.1:7070"
        cli = subprocess.run(
            [CLI, f"--coordinator={remote}", f"--token_file={token_file}",
             "ls"], capture_output=True, text=True, timeout=60)
        self.assertEqual(cli.returncode, 1, cli.stdout)
        self.assertIn(f"refusing to send the token in plaintext to {remote}",
                      cli.stderr)
        self.assertIn("--allow_plaintext_token", cli.stderr)
        worker = subprocess.run(
            [WORKER, f"--coordinator={remote}", f"--token_file={token_file}",
             "--devices=cpu:1", "--metrics_listen=127.0.0.1:0",
             f"--work_dir={os.path.join(self.root, 'refused-work')}"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(worker.returncode, 1, worker.stdout)
        self.assertIn("refusing to send the node's token in plaintext to "
                      f"--coordinator={remote}", worker.stderr)
        daemon = subprocess.run(
            [PLATEAUD, "--listen=0.0.0.0:0", "--metrics_listen=127.0.0.1:0",
             f"--data_dir={os.path.join(self.root, 'refused-data')}",
             f"--tokens_file={token_file}"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(daemon.returncode, 1, daemon.stdout)
        self.assertIn("--tokens_file without TLS on --listen=0.0.0.0:0",
                      daemon.stderr)
        # Nor does it run open off loopback unless told to.
        daemon = subprocess.run(
            [PLATEAUD, "--listen=0.0.0.0:0", "--metrics_listen=127.0.0.1:0",
             f"--data_dir={os.path.join(self.root, 'open-data')}"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(daemon.returncode, 1, daemon.stdout)
        self.assertIn("--listen=0.0.0.0:0 is not a loopback address and "
                      "there is no --tokens_file", daemon.stderr)
        self.assertIn("--insecure_no_auth", daemon.stderr)
        # A token is never a flag.
        flag = subprocess.run([CLI, "--token=secret", "ls"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(flag.returncode, 2, flag.stdout)

    def test_bad_specs_and_failed_jobs_exit_non_zero(self):
        cluster = self.cluster("bad-input", workers=(("node-a", 2),))
        bad = os.path.join(cluster.root, "bad.yaml")
        with open(bad, "w") as file:
            file.write(SPEC.format(
                name="bad", nodes=1, devices_per_node=2, schedules="sco: 1",
                data=CLUSTER_DATA, steps=-5, checkpoint_every=10,
                max_restarts=0)
                .replace("heads: 4", "heads: 5"))
        result = cluster.cli("submit", bad, check=False)
        self.assertNotEqual(result.returncode, 0)
        for field in ("model.heads", "schedules.sco", "train.steps"):
            self.assertRegex(result.stderr, rf"(?m)^.*{re.escape(field)}: ")
        self.assertEqual(json.loads(
            cluster.cli("ls", "-o", "json").stdout).get("jobs", []), [])

        # Data that is not there: the ranks fail, no restarts are left.
        # Its path carries a terminal's title-change sequence, which must
        # reach nobody's terminal raw.
        spec = cluster.write_spec(
            "no-data", steps=10, max_restarts=0,
            data='"data/missing\\e]0;pwned\\a"')
        watched = cluster.cli("submit", spec, "--watch", check=False)
        self.assertEqual(watched.returncode, 3, watched.stdout)
        self.assertIn("FAILED", watched.stdout)
        job_id = re.search(r"\b(j-[0-9a-z]+)\b", watched.stdout).group(1)
        self.assertIn("missing", cluster.describe(job_id)["last_error"])
        for shown in (watched.stdout, cluster.cli("describe", job_id).stdout,
                      cluster.cli("logs", job_id).stdout):
            self.assertNotIn("\x1b", shown)
            self.assertNotIn("\x07", shown)
        self.assertIn("missing\\x1b]0;pwned\\x07",
                      cluster.cli("describe", job_id).stdout)

    def test_jobs_read_only_beneath_their_read_roots(self):
        # Each way out, as the user ada: an absolute path, a `..`, another
        # user's root (refused at submit, lexically, before anything is
        # read), and a symlink out of data/ (refused by the rank, which
        # resolves what it reads beneath its root). Her own root works.
        ada_root = os.path.join(self.root, "ada-datasets")
        admin_root = os.path.join(self.root, "admin-datasets")
        for root in (ada_root, admin_root):
            shutil.copytree(DATA, os.path.join(root, "synthetic"))
        cluster = self.cluster(
            "confined", workers=(("node-a", 2),), auth=True,
            read_roots={"ada": [ada_root], "root": [admin_root]})

        def submit(name, data, *flags):
            spec = cluster.write_spec(name, steps=3, max_restarts=0,
                                      data=f'"{data}"')
            return cluster.cli("submit", spec, *flags, check=False,
                               timeout=600)

        refusals = {}
        for name, data in (("absolute", "/etc"), ("absent", "/no/such/dir"),
                           ("dotdot", "data/../../../../root"),
                           ("others", os.path.join(admin_root, "synthetic"))):
            refused = submit(name, data)
            self.assertNotEqual(refused.returncode, 0, refused.stdout)
            self.assertIn(
                f"data.path: '{data}' is not under the directories jobs may "
                "read: data/ and models/ of the worker's work directory, "
                f"{ada_root}/", refused.stderr)
            refusals[name] = refused.stderr.replace(data, "PATH")
        # Whether a path outside the roots exists is not told.
        self.assertEqual(refusals["absolute"], refusals["absent"])
        self.assertEqual(json.loads(
            cluster.cli("ls", "-o", "json").stdout).get("jobs", []), [])

        os.symlink("/etc", os.path.join(cluster.work, "data", "escape"))
        escaped = submit("symlink", "data/escape", "--watch")
        self.assertEqual(escaped.returncode, 3, escaped.stdout)
        job_id = re.search(r"\b(j-[0-9a-z]+)\b", escaped.stdout).group(1)
        self.assertIn("data.path: data/escape leads outside data (a symlink "
                      "out of it): jobs read only beneath data/ and models/",
                      cluster.describe(job_id)["last_error"])

        own = submit("own", os.path.join(ada_root, "synthetic"), "--watch")
        self.assertEqual(own.returncode, 0, own.stdout + own.stderr)
        self.assertIn("SUCCEEDED", own.stdout)

    def test_the_qwen_like_example_trains_in_the_quickstart_cluster(self):
        # deploy/examples/qwen-like-moe.yaml as it is, on the quickstart's
        # cluster (one worker of two CPU devices of 2 GiB), for a few steps
        # of the synthetic corpus instead of 300 of Brown (whose validation
        # split is too small for two ranks to evaluate on).
        with open(QWEN_LIKE_EXAMPLE) as file:
            spec = yaml.safe_load(file)
        spec["data"]["path"] = CLUSTER_DATA
        spec["train"].update(steps=6, checkpoint_every=3, eval_every=0)
        cluster = self.cluster("qwen-like", workers=(("local", 2),),
                               device_memory="2GiB")
        path = os.path.join(cluster.root, "qwen-like-moe.yaml")
        with open(path, "w") as file:
            yaml.safe_dump(spec, file)
        watched = cluster.cli("submit", path, "--watch", timeout=600)
        self.assertIn("SUCCEEDED", watched.stdout)
        job_id = re.search(r"\b(j-[0-9a-z]+)\b", watched.stdout).group(1)
        job = cluster.describe(job_id)
        self.assertEqual(int(job["progress"]["step"]), 6)
        self.assertEqual(int(job["progress"]["checkpoint_step"]), 6)
        logs = cluster.cli("logs", job_id).stdout
        self.assertIn("8 heads (2 key-value, QK-norm), 8 experts (top 2) + 1 "
                      "shared (ffn 512)", logs)
        # The shared expert and the expert bias are in the checkpoint.
        manifest_path = os.path.join(cluster.work, "runs", job_id,
                                     "checkpoints", "step-00000006",
                                     "MANIFEST.json")
        with open(manifest_path) as file:
            header = json.load(file)["weights"]
        for layer in range(4):
            prefix = f"layers.{layer}.moe."
            self.assertEqual(header[prefix + "shared_experts.w1"]["shape"],
                             [512, 256])
            self.assertEqual(header[prefix + "shared_experts.w2"]["shape"],
                             [256, 512])
            self.assertEqual(header[prefix + "router.expert_bias"]["shape"],
                             [8])

    def test_a_job_starts_from_a_hugging_face_directory(self):
        # A job's checkpoint exported to the Hugging Face layout, and a
        # second job with `init_from` naming it: plateaud carries the field
        # to the ranks (describe shows it), both start from the directory,
        # and the second job's first loss is the trained model's, well below
        # the first job's.
        cluster = self.cluster("init-from", workers=(("node-a", 2),))
        first = cluster.cli("submit", cluster.write_spec("first", steps=30),
                            "--watch", timeout=600)
        self.assertIn("SUCCEEDED", first.stdout)
        first_id = re.search(r"\b(j-[0-9a-z]+)\b", first.stdout).group(1)
        # Where plateaud lets jobs read models by default: the work
        # directory's models/.
        exported = "models/first-hf"
        subprocess.run(
            [WORKER, "export", cluster.write_spec("first", steps=30),
             "--weights=" + os.path.join(cluster.work, "runs", first_id,
                                         "checkpoints", "step-00000030"),
             f"--output={os.path.join(cluster.work, exported)}"], check=True,
            capture_output=True)
        path = cluster.write_spec("second", steps=3)
        with open(path, "a") as file:
            file.write(f"init_from: {exported}\n")
        second = cluster.cli("submit", path, "--watch", timeout=600)
        self.assertIn("SUCCEEDED", second.stdout)
        second_id = re.search(r"\b(j-[0-9a-z]+)\b", second.stdout).group(1)
        self.assertIn(f"init_from: {exported}",
                      cluster.cli("describe", second_id).stdout)
        logs = cluster.cli("logs", second_id).stdout
        self.assertIn(f"init_from: starting from {exported} "
                      "(MixtralForCausalLM, F32)", logs)

        def first_loss(job_id):
            line = next(line for line in
                        cluster.cli("logs", job_id).stdout.splitlines()
                        if re.search(r"step\s+1\b", line))
            return float(re.search(r"loss ([0-9.]+)", line).group(1))

        self.assertLess(first_loss(second_id), first_loss(first_id) - 1.0)

    def test_admission_plans_memory_and_refuses_what_cannot_fit(self):
        # The example spec, planned here without plateaud.
        planned = subprocess.run(
            [CLI, "plan", EXAMPLE, "--device_memory", "2GiB"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(planned.returncode, 0, planned.stderr)
        for text in ("plan for tiny-moe: 2 devices of 2.00 GiB",
                     "vocab_projection", "device peak", "host peak",
                     "binds first (planned): ", "fits: yes", "max seq_len: ",
                     "checkpoint write: up to "):
            self.assertIn(text, planned.stdout)
        # Without plateaud no stop grace is known to warn of.
        self.assertNotIn("warning:", planned.stdout)
        as_json = subprocess.run(
            [CLI, "plan", EXAMPLE, "--device_memory=2GiB", "-o", "json"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(as_json.returncode, 0, as_json.stderr)
        parsed = json.loads(as_json.stdout)
        self.assertTrue(parsed["plan"]["fits"])
        self.assertTrue(parsed["schedules"]["ring_dtp"])
        # The example in fp32 does not fit 90 MiB devices; in bf16 it would,
        # and the plan says so with the peak it would have.
        with open(EXAMPLE) as file:
            example = file.read()
        self.assertIn("\nprecision: auto", example)
        fp32_example = os.path.join(self.root, "tiny-moe-fp32.yaml")
        with open(fp32_example, "w") as file:
            file.write(example.replace("\nprecision: auto",
                                       "\nprecision: fp32"))
        too_small = subprocess.run(
            [CLI, "plan", fp32_example, "--device_memory", "90MiB"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(too_small.returncode, 1, too_small.stderr)
        self.assertIn("fits: no", too_small.stdout)
        self.assertRegex(too_small.stdout,
                         r"; or compute in bf16 \(precision: bf16\): the "
                         r"planned device peak is then [0-9.]+ MiB")

        # Without a node there is nothing to choose `schedules: auto` for.
        empty = self.cluster("no-nodes", workers=())
        auto_spec = empty.write_spec(
            "auto", steps=6, checkpoint_every=0,
            replace=(("schedules: {}", "schedules: auto"),))
        refused = empty.cli("submit", auto_spec, check=False)
        self.assertEqual(refused.returncode, 1, refused.stdout)
        self.assertIn("attach a worker first", refused.stderr)

        # Nodes that write a checkpoint at 1 kB/s: any stop outlasts the
        # grace, and `plateau plan` says so.
        cluster = self.cluster(
            "admission", workers=(("node-a", 2),), device_memory="256MiB",
            daemon_flags=("--checkpoint_write_bytes_per_second=1000",))
        # A 2,000,000-word vocabulary: embedding, head and logits far beyond
        # 256 MiB devices.
        huge = cluster.write_spec(
            "huge-vocab", steps=6,
            replace=(("vocab: 320", "vocab: 2000000"),))
        refused = cluster.cli("submit", huge, check=False)
        self.assertNotEqual(refused.returncode, 0, refused.stdout)
        self.assertIn("job does not fit its devices: ", refused.stderr)
        self.assertRegex(refused.stderr, "|".join(COMPONENTS))
        self.assertEqual(json.loads(
            cluster.cli("ls", "-o", "json").stdout).get("jobs", []), [])
        # `plan` without --device_memory asks plateaud for its nodes'.
        too_big = cluster.cli("plan", huge, check=False)
        self.assertEqual(too_big.returncode, 1, too_big.stderr)
        self.assertIn("2 devices of 256.00 MiB", too_big.stdout)
        self.assertIn("fits: no", too_big.stdout)
        self.assertRegex(too_big.stdout,
                         r"checkpoint write: up to [0-9.]+ \w+ a node, about "
                         r"[0-9.]+ s at 1000 B/s\nwarning: a stop or "
                         r"preemption writes checkpoints for up to [0-9.]+ s "
                         r"\(the write in flight, then its own\), but "
                         rf"plateaud's --stop_grace_period is {GRACE_SECONDS} "
                         r"s")

        # `schedules: auto`: the planner's choice is stored, shown and run.
        auto_spec = cluster.write_spec(
            "auto", steps=6, checkpoint_every=0,
            replace=(("schedules: {}", "schedules: auto"),))
        job_id = cluster.submit(auto_spec)
        described = cluster.cli("describe", job_id).stdout
        self.assertIn("Memory plan:", described)
        self.assertIn("fits: yes", described)
        self.assertIn("(chosen by the planner)", described)
        self.assertIn("binds first: ", described)
        self.assertIn("auto: true", described)  # the spec as planned
        job = cluster.wait_for_state(job_id, ["JOB_STATE_SUCCEEDED"])
        self.assertTrue(job["plan"]["fits"])
        self.assertTrue(job["plan"]["schedules_chosen"])
        self.assertEqual(job["plan"]["device_memory_bytes"], str(256 << 20))
        schedules = job["spec"]["schedules"]
        self.assertTrue(schedules["auto"])
        for field in ("dispatch_chunk_tokens", "ring_dtp", "sco"):
            self.assertIn(field, schedules)
        self.assertEqual(int(job["progress"]["step"]), 6)


if __name__ == "__main__":
    PLATEAUD = os.path.abspath(sys.argv.pop(1))
    WORKER = os.path.abspath(sys.argv.pop(1))
    CLI = os.path.abspath(sys.argv.pop(1))
    EXAMPLE = os.path.abspath(sys.argv.pop(1))
    QWEN_LIKE_EXAMPLE = os.path.abspath(sys.argv.pop(1))
    junit.main()
