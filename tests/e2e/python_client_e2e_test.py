"""The Python client (client/python, the `plateau` package) against a live
plateaud with tokens and one worker on loopback: submit (a file, a JobSpec,
YAML text; an idempotency key returns the same job), wait and watch,
describe, ls, queue (each still answering after one user's flood of large
specs), logs (an iterator, followed to the end), cancel, nodes,
drain and resume (an admin's), and plan, and the errors a caller sees as
PlateauError with plateaud's code and message. Found and authenticated as the CLI is: the arguments, PLATEAU_TOKEN,
and the config file (refused when others may read its token), and no token
in plaintext off loopback.

Usage (Bazel runs it, see BUILD):
  python_client_e2e_test.py PLATEAU_ZIP PLATEAUD PLATEAU_WORKER PLATEAU
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
import service_e2e_test as service  # noqa: E402
import synthetic_corpus  # noqa: E402

plateau = None  # the package, imported from the built zip in __main__


class PythonClientEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        # No config file of the machine's: the tests write their own.
        cls.config_home = os.path.join(cls.root, "config")
        os.environ["XDG_CONFIG_HOME"] = cls.config_home
        os.environ.pop("PLATEAU_TOKEN", None)
        os.environ.pop("PLATEAU_COORDINATOR", None)
        service.DATA = synthetic_corpus.prepare_data(service.WORKER, cls.root)
        cls.cluster = service.Cluster(cls.root, "python", [("node-a", 2)],
                                      auth=True)
        cls.client = plateau.Client(coordinator=cls.cluster.address,
                                    token=cls.cluster.user_token)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def spec(self, name, steps, **options):
        return self.cluster.write_spec(name, steps=steps, **options)

    def test_a_job_from_submit_to_its_logs(self):
        job = self.client.submit(self.spec("python-run", steps=6,
                                           checkpoint_every=3))
        self.assertRegex(job.id, r"^j-[0-9a-z]+$")
        self.assertEqual(job.spec.name, "python-run")
        self.assertEqual(job.owner, "ada")
        done = self.client.wait(job.id)
        self.assertEqual(done.state, plateau.job_pb2.JOB_STATE_SUCCEEDED)
        self.assertEqual(done.progress.step, 6)
        described = self.client.describe(job.id)
        self.assertEqual(described.progress.checkpoint_step, 6)
        self.assertGreater(described.progress.loss, 0)
        self.assertIn(job.id, [listed.id for listed in self.client.ls()])
        succeeded = self.client.ls(
            states=[plateau.job_pb2.JOB_STATE_SUCCEEDED])
        self.assertIn(job.id, [listed.id for listed in succeeded])
        self.assertTrue(all(listed.state ==
                            plateau.job_pb2.JOB_STATE_SUCCEEDED
                            for listed in succeeded))
        with self.assertRaises(plateau.PlateauError) as raised:
            self.client.ls(owner="nobody")
        self.assertEqual(raised.exception.code,
                         grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("only admins may list other users' jobs",
                      str(raised.exception))
        entries = list(self.client.logs(job.id, follow=True))
        lines = [entry.line.text for entry in entries
                 if entry.HasField("line")]
        events = [entry.event.kind for entry in entries
                  if entry.HasField("event")]
        self.assertTrue(any("step" in line and "loss" in line
                            for line in lines), lines[-5:])
        self.assertEqual(events[0], plateau.job_pb2.JOB_EVENT_KIND_SUBMITTED)
        self.assertEqual(events[-1],
                         plateau.job_pb2.JOB_EVENT_KIND_SUCCEEDED)
        sequences = [entry.sequence for entry in entries]
        self.assertEqual(sequences, sorted(sequences))
        later = list(self.client.logs(job.id, after_sequence=sequences[-2]))
        self.assertEqual([entry.sequence for entry in later],
                         [sequences[-1]])

    def test_submit_a_spec_message_and_yaml_text_once_per_key(self):
        with open(self.spec("python-text", steps=300)) as file:
            text = file.read()
        first = self.client.submit_yaml(text, idempotency_key="k-1")
        again = self.client.submit_yaml(text, idempotency_key="k-1")
        self.assertEqual(again.id, first.id)
        message = self.client.submit(first.spec)
        self.assertNotEqual(message.id, first.id)
        self.assertEqual(message.spec, first.spec)
        for job in (first, message):
            cancelled = self.client.cancel(job.id, reason="from python")
            self.assertIn(cancelled.state,
                          (plateau.job_pb2.JOB_STATE_CANCELLING,
                           plateau.job_pb2.JOB_STATE_CANCELLED))
            final = self.client.wait(job.id)
            self.assertEqual(final.state,
                             plateau.job_pb2.JOB_STATE_CANCELLED)
        updates = list(self.client.watch(first.id))
        self.assertEqual(updates[-1].job.state,
                         plateau.job_pb2.JOB_STATE_CANCELLED)

    def test_nodes_and_plan(self):
        nodes = self.client.nodes()
        self.assertEqual([node.name for node in nodes], ["node-a"])
        self.assertEqual(len(nodes[0].devices), 2)
        planned = self.client.plan(self.spec("python-plan", steps=10))
        self.assertTrue(planned.plan.fits)
        self.assertEqual(planned.plan.device_memory_bytes, 1 << 30)
        self.assertGreater(planned.plan.planned.device_peak_bytes, 0)
        self.assertGreater(planned.plan.max_seq_len, 0)
        self.assertEqual(planned.spec.name, "python-plan")
        # schedules: auto comes back with the planner's choice; for a
        # device given, a job too large for it does not fit.
        auto = self.client.plan(self.spec(
            "python-auto", steps=10,
            replace=(("schedules: {}", "schedules: auto"),)))
        self.assertTrue(auto.spec.schedules.auto)
        self.assertTrue(auto.spec.schedules.HasField("sco"))
        small = self.client.plan(self.spec("python-small", steps=10),
                                 device_memory_bytes=1 << 20)
        self.assertFalse(small.plan.fits)
        self.assertEqual(small.plan.device_memory_bytes, 1 << 20)
        # Planning submits nothing.
        self.assertNotIn("python-plan",
                         [job.spec.name for job in self.client.ls()])

    def test_an_admin_drains_and_a_job_waits_first_in_the_queue(self):
        with self.assertRaises(plateau.PlateauError) as raised:
            self.client.drain("node-a")
        self.assertEqual(raised.exception.code,
                         grpc.StatusCode.PERMISSION_DENIED)
        with plateau.Client(coordinator=self.cluster.address,
                            token=self.cluster.admin_token) as admin:
            node = admin.drain("node-a", reason="new NIC")
            self.assertEqual(node.state, plateau.node_pb2.NODE_STATE_DRAINING)
            self.assertEqual(self.client.nodes()[0].drain_reason, "new NIC")
            job = self.client.submit(self.spec("python-queued", steps=4))
            deadline = time.time() + 30
            while True:
                queue = self.client.queue()
                if queue and queue[0].queue_position == 1:
                    break
                self.assertLess(time.time(), deadline, queue)
                time.sleep(0.2)
            self.assertEqual([queued.id for queued in queue], [job.id])
            self.assertIn("never fits", queue[0].wait_reason)
            node = admin.resume("node-a")
            self.assertEqual(node.state, plateau.node_pb2.NODE_STATE_READY)
            self.assertEqual(node.drain_reason, "")
        self.assertEqual(self.client.wait(job.id).state,
                         plateau.job_pb2.JOB_STATE_SUCCEEDED)
        self.assertEqual(self.client.queue(), [])

    def test_one_users_flood_leaves_every_list_answering(self):
        # 300 submissions of a 63 KB spec by one user: the admin's `plateau
        # ls` and ls(), and the user's queue(), still answer, each row a
        # summary. The jobs need two nodes, and there is one: they wait.
        with open(self.spec("python-flood", steps=4, nodes=2,
                            devices_per_node=1)) as file:
            text = file.read()
        text += "# " + "x" * (63_000 - len(text)) + "\n"
        flood = {self.client.submit_yaml(text).id for _ in range(300)}
        try:
            with plateau.Client(coordinator=self.cluster.address,
                                token=self.cluster.admin_token) as admin:
                listed = admin.ls()
            self.assertLessEqual(flood, {job.id for job in listed})
            row_bytes = [job.ByteSize() for job in listed]
            self.assertLess(max(row_bytes), 1024)
            self.assertTrue(all(job.spec_yaml == "" for job in listed))
            queued = self.client.queue()
            self.assertLessEqual(flood, {job.id for job in queued})
            environment = dict(os.environ,
                               PLATEAU_TOKEN=self.cluster.admin_token)
            result = subprocess.run(
                [service.CLI, f"--coordinator={self.cluster.address}", "ls"],
                capture_output=True, text=True, timeout=60, env=environment)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(
                sum(job_id in result.stdout for job_id in flood), 300)
            print(f"a 63 KB spec submitted 300 times: the admin's ls lists "
                  f"{len(listed)} rows of at most {max(row_bytes)} bytes, "
                  f"{sum(row_bytes) / 1024:.1f} KiB in all")
        finally:
            for job_id in flood:
                self.client.cancel(job_id)

    def test_errors_carry_plateauds_code_and_message(self):
        with self.assertRaises(plateau.PlateauError) as raised:
            self.client.submit_yaml("name: Bad Name\nmodel: {layers: 0}\n")
        self.assertEqual(raised.exception.code,
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("name:", raised.exception.message)
        self.assertIn("model.layers", raised.exception.message)
        with self.assertRaises(plateau.PlateauError) as raised:
            self.client.plan(self.spec("python-bad-plan", steps=10,
                                       replace=(("heads: 4", "heads: 5"),)))
        self.assertEqual(raised.exception.code,
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("model.heads", raised.exception.message)
        with self.assertRaises(plateau.PlateauError) as raised:
            self.client.describe("j-99999999")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(TypeError):
            self.client.submit(42)
        with plateau.Client(coordinator=self.cluster.address) as anonymous:
            with self.assertRaises(plateau.PlateauError) as raised:
                anonymous.ls()
        self.assertEqual(raised.exception.code,
                         grpc.StatusCode.UNAUTHENTICATED)

    def test_found_and_authenticated_as_the_cli_is(self):
        os.environ["PLATEAU_COORDINATOR"] = self.cluster.address
        os.environ["PLATEAU_TOKEN"] = self.cluster.user_token
        try:
            with plateau.Client() as client:
                self.assertEqual(client.nodes()[0].name, "node-a")
        finally:
            del os.environ["PLATEAU_COORDINATOR"]
            del os.environ["PLATEAU_TOKEN"]
        path = os.path.join(self.config_home, "plateau", "config.yaml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as file:
            file.write(f"coordinator: {self.cluster.address}\n"
                       f"token: {self.cluster.user_token}\n")
        os.chmod(path, 0o644)
        with self.assertRaises(plateau.ConfigError) as raised:
            plateau.Client()
        self.assertIn(f"{path}: holds a token, but others may read it "
                      f"(mode 0644); run chmod 600 {path}",
                      str(raised.exception))
        os.chmod(path, 0o600)
        with plateau.Client() as client:
            self.assertEqual(client.nodes()[0].name, "node-a")
        with open(path, "w") as file:
            file.write("coordinator: [a, b]\n")
        with self.assertRaises(plateau.ConfigError) as raised:
            plateau.Client()
        self.assertIn(f"{path}: coordinator: expected a string",
                      str(raised.exception))
        os.remove(path)
        with self.assertRaises(plateau.ConfigError) as raised:
            plateau.Client(coordinator="192.0.2.1:7070", token="secret")
        self.assertIn("refusing to send the token in plaintext to "
                      "192.0.2.1:7070", str(raised.exception))
        plateau.Client(coordinator="192.0.2.1:7070", token="secret",
                       allow_plaintext_token=True).close()


if __name__ == "__main__":
    sys.path.insert(0, os.path.abspath(sys.argv.pop(1)))
    import plateau  # noqa: E402,F811
    service.PLATEAUD = os.path.abspath(sys.argv.pop(1))
    service.WORKER = os.path.abspath(sys.argv.pop(1))
    service.CLI = os.path.abspath(sys.argv.pop(1))
    junit.main()
