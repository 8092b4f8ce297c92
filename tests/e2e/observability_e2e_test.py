"""The shipped Prometheus configuration, rules and Grafana dashboards against
a real Prometheus (Debian's `prometheus`) scraping a real plateaud and
worker agent while a real job trains, all on loopback.

- promtool accepts the configuration and the rules, and the rules' unit
  tests (one per alert) pass.
- Prometheus finds the worker through plateaud's HTTP service discovery.
- Every query of every panel of every shipped dashboard (job and rank
  variables set to the running job and its rank 1), and every recording
  rule, returns data; every alert rule evaluates without error. A query that
  returns nothing fails the test, naming the dashboard and the panel.

Usage (Bazel runs it, see BUILD):
  observability_e2e_test.py PLATEAUD PLATEAU_WORKER PLATEAU PROMETHEUS_YML
      GRAFANA_FILE...   (the dashboards are the .json ones)
"""

import glob
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
import urllib.error
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
from loopback import free_port, wait_until  # noqa: E402
import synthetic_corpus  # noqa: E402

PLATEAUD = WORKER = CLI = PROMETHEUS_YML = None
DASHBOARDS = []

SPEC = """\
name: observed
resources: {{nodes: 1, devices_per_node: 2}}
model: {{layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,
        ffn_hidden: 128, vocab: 320, seq_len: 64}}
parallel: {{ep: 2, pp: 1, dp: 1}}
schedules: {{dispatch_chunk_tokens: 96, ring_dtp: true, sco: true,
            optimizer_offload: stream}}
optimizer: {{kind: skewadam, lr: 1.0e-2, warmup_steps: 2}}
data: {{path: {data}, batch_tokens: 1024}}
train: {{steps: 100000, checkpoint_every: 10, eval_every: 5, seed: 7}}
"""

# Grafana's own variables, as a query over the last minute would see them.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "15s",
                     "__range": "5m"}


def http_json(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read().decode())


def panels_of(dashboard):
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def substitute(expr, variables):
    for name in sorted(variables, key=len, reverse=True):
        value = variables[name]
        expr = expr.replace("${" + name + "}", value)
        expr = expr.replace("$" + name, value)
    return expr


class ObservabilityEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        data = synthetic_corpus.prepare_data(WORKER, cls.root)
        cls.processes = []
        cls.address = f"127.0.0.1:{free_port()}"
        cls.daemon_metrics = f"127.0.0.1:{free_port()}"
        cls.start([PLATEAUD, f"--listen={cls.address}",
                   f"--metrics_listen={cls.daemon_metrics}",
                   f"--data_dir={os.path.join(cls.root, 'plateaud-data')}",
                   f"--read_roots={data}",
                   "--heartbeat_interval=0.5s", "--stop_grace_period=5s"],
                  "plateaud")
        # The worker's /metrics asks for the scrape token, which the
        # shipped config has Prometheus present.
        cls.scrape_token = os.path.join(cls.root, "plateau-scrape.token")
        with open(cls.scrape_token, "w") as file:
            file.write(os.urandom(16).hex() + "\n")
        cls.start([WORKER, f"--coordinator={cls.address}", "--name=node-a",
                   "--devices=cpu:2", "--device_memory=1GiB",
                   "--metrics_listen=127.0.0.1:0",
                   f"--metrics_token_file={cls.scrape_token}",
                   f"--work_dir={os.path.join(cls.root, 'work')}",
                   "--threads=1"], "worker")
        wait_until(lambda: "READY" in cls.cli("nodes").stdout, 30,
                   "the worker to attach")
        cls.prometheus = f"127.0.0.1:{free_port()}"
        cls.start(["prometheus", f"--config.file={cls.render_config()}",
                   f"--storage.tsdb.path={os.path.join(cls.root, 'tsdb')}",
                   f"--web.listen-address={cls.prometheus}"], "prometheus")
        wait_until(cls.prometheus_ready, 60, "Prometheus to be ready")

        spec = os.path.join(cls.root, "spec.yaml")
        with open(spec, "w") as file:
            file.write(SPEC.format(data=data))
        cls.job_id = re.search(r"j-[0-9a-z]+",
                               cls.cli("submit", spec).stdout).group(0)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "job_id", None):
            cls.cli("cancel", cls.job_id)
        for process in reversed(cls.processes):
            process.send_signal(signal.SIGTERM)
        for process in reversed(cls.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(cls.root, ignore_errors=True)

    @classmethod
    def start(cls, argv, name):
        log = open(os.path.join(cls.root, name + ".log"), "ab")
        cls.processes.append(subprocess.Popen(argv, stdout=log,
                                              stderr=subprocess.STDOUT))

    @classmethod
    def cli(cls, *args):
        return subprocess.run([CLI, f"--coordinator={cls.address}", *args],
                              capture_output=True, text=True, timeout=60)

    @classmethod
    def render_config(cls):
        """The shipped configuration, pointed at this plateaud and this
        test's scrape token, scraping and evaluating every second."""
        with open(PROMETHEUS_YML) as file:
            config = yaml.safe_load(file)
        config["global"]["scrape_interval"] = "1s"
        config["global"]["evaluation_interval"] = "1s"
        rules = os.path.dirname(os.path.abspath(PROMETHEUS_YML))
        config["rule_files"] = [os.path.join(rules, name)
                                for name in config["rule_files"]]
        shipped_token = "/etc/prometheus/plateau-scrape.token"
        for scrape in config["scrape_configs"]:
            assert scrape["authorization"]["credentials_file"] == shipped_token
            scrape["authorization"]["credentials_file"] = cls.scrape_token
            for discovery in scrape.get("http_sd_configs", []):
                assert (discovery["authorization"]["credentials_file"] ==
                        shipped_token)
                discovery["authorization"]["credentials_file"] = (
                    cls.scrape_token)
            for static in scrape.get("static_configs", []):
                static["targets"] = [cls.daemon_metrics]
            for discovery in scrape.get("http_sd_configs", []):
                discovery["url"] = discovery["url"].replace(
                    "127.0.0.1:9400", cls.daemon_metrics)
                discovery["refresh_interval"] = "1s"
        path = os.path.join(cls.root, "prometheus.yml")
        with open(path, "w") as file:
            yaml.safe_dump(config, file)
        return path

    @classmethod
    def prometheus_ready(cls):
        try:
            with urllib.request.urlopen(f"http://{cls.prometheus}/-/ready",
                                        timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, expr):
        response = http_json(f"http://{self.prometheus}/api/v1/query?" +
                             urllib.parse.urlencode({"query": expr}))
        self.assertEqual(response["status"], "success", expr)
        return response["data"]["result"]

    def logs(self):
        return "\n".join(
            f"--- {name}\n{open(name).read()[-3000:]}"
            for name in glob.glob(os.path.join(self.root, "*.log")))

    def test_promtool_accepts_the_config_and_the_rules_pass_their_tests(self):
        directory = os.path.dirname(os.path.abspath(PROMETHEUS_YML))
        # The shipped config with this test's token file, which promtool
        # requires to exist.
        for command in (["check", "config", self.render_config()],
                        ["check", "rules", "recording_rules.yml",
                         "alert_rules.yml"],
                        ["test", "rules", "alert_rules_test.yml"]):
            result = subprocess.run(["promtool", *command], cwd=directory,
                                    capture_output=True, text=True)
            self.assertEqual(result.returncode, 0,
                             f"promtool {' '.join(command)}:\n"
                             f"{result.stdout}{result.stderr}")

    def test_every_dashboard_query_and_rule_returns_data(self):
        # The worker is found through plateaud's service discovery...
        targets = http_json(f"http://{self.daemon_metrics}/sd/workers")
        self.assertEqual(len(targets), 1, targets)
        self.assertEqual(targets[0]["labels"], {"node": "node-a"})
        # Its /metrics answers only the scrape token.
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(
                f"http://{targets[0]['targets'][0]}/metrics", timeout=10)
        self.assertEqual(refused.exception.code, 401)
        wait_until(lambda: any(
            target["labels"].get("node") == "node-a" and
            target["health"] == "up"
            for target in http_json(f"http://{self.prometheus}/api/v1/targets")
            ["data"]["activeTargets"]), 60,
            f"Prometheus to scrape the worker\n{self.logs()}")
        # ...and the job has trained, validated and checkpointed.
        wait_until(lambda: self.query(
            f'plateau_train_validation_loss{{job="{self.job_id}"}}') and
            self.query(f'plateau_train_step{{job="{self.job_id}"}} >= 20') and
            self.query(
                f'plateau_checkpoint_stall_seconds{{job="{self.job_id}"}}'),
            180, f"the job's series\n{self.logs()}")
        time.sleep(3)  # a few more samples for the rates

        variables = dict(BUILTIN_VARIABLES, job=self.job_id, rank="1",
                         layer="0")
        empty = []
        queries = 0
        for path in DASHBOARDS:
            with open(path) as file:
                dashboard = json.load(file)
            for panel in panels_of(dashboard):
                for target in panel.get("targets", []):
                    if not target.get("expr"):
                        continue
                    expr = substitute(target["expr"], variables)
                    self.assertNotIn("$", expr, f"unknown variable in {expr}")
                    queries += 1
                    if not self.query(expr):
                        empty.append(f"{dashboard['title']} / "
                                     f"{panel.get('title')}: {expr}")
        self.assertGreater(queries, 20)

        rule_groups = http_json(
            f"http://{self.prometheus}/api/v1/rules")["data"]["groups"]
        rules = [rule for group in rule_groups for rule in group["rules"]]
        recorded = [rule["name"] for rule in rules
                    if rule["type"] == "recording"]
        alerts = [rule for rule in rules if rule["type"] == "alerting"]
        self.assertEqual(len(recorded), 4)
        self.assertEqual(len(alerts), 6)
        for name in recorded:
            if not self.query(name):
                empty.append(f"recording rule {name}")
        self.assertEqual(empty, [], "queries that returned nothing")
        for rule in rules:
            self.assertEqual(rule["health"], "ok",
                             f"{rule['name']}: {rule.get('lastError')}")


if __name__ == "__main__":
    PLATEAUD = os.path.abspath(sys.argv.pop(1))
    WORKER = os.path.abspath(sys.argv.pop(1))
    CLI = os.path.abspath(sys.argv.pop(1))
    PROMETHEUS_YML = os.path.abspath(sys.argv.pop(1))
    # The Grafana files: the dashboards are the JSON ones.
    while len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        path = sys.argv.pop(1)
        if path.endswith(".json"):
            DASHBOARDS.append(os.path.abspath(path))
    junit.main()
