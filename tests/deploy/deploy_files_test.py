"""Checks the deployment files under deploy/ without deploying them: the
Grafana dashboards and provisioning, the systemd units and their env files,
the Kubernetes manifests and the Dockerfile. Every flag they pass must be one
plateaud or plateau-worker declares, and every metric a dashboard queries one
that Plateau exports (or a recording rule of deploy/prometheus).

Usage (Bazel runs it, see BUILD; from the repository root):
  deploy_files_test.py deploy/Dockerfile daemon/main.cc worker/cli/flags.cc
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402

DEPLOY = None  # deploy/, from the Dockerfile's path
DAEMON_FLAGS = None  # {name: help} of daemon/main.cc
WORKER_FLAGS = None  # {name: help} of worker/cli/flags.cc

DATASOURCE = {"type": "prometheus", "uid": "plateau-prometheus"}

# uid, title and template variables of each dashboard.
DASHBOARDS = {
    "job-memory.json": ("plateau-job-memory", "Plateau / Job memory",
                        ["job", "rank"]),
    "job-training.json": ("plateau-job-training", "Plateau / Job training",
                          ["job", "layer"]),
    "cluster.json": ("plateau-cluster", "Plateau / Cluster", []),
}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}

# What Plateau exports (docs/ARCHITECTURE.md section 6 and the exporters in
# daemon/ and worker/) and the recording rules of
# deploy/prometheus/recording_rules.yml. A dashboard may query nothing else.
METRICS = {
    # plateau-worker
    "plateau_memory_peak_bytes", "plateau_memory_current_bytes",
    "plateau_device_memory_capacity_bytes",
    "plateau_device_memory_peak_bytes",
    "plateau_device_memory_current_bytes", "plateau_train_tokens_total",
    "plateau_train_tokens_per_second", "plateau_train_loss",
    "plateau_train_validation_loss", "plateau_train_step",
    "plateau_expert_tokens_total", "plateau_expert_load_imbalance_ratio",
    "plateau_optimizer_state_bytes", "plateau_checkpoint_stall_seconds",
    "plateau_checkpoint_write_seconds",
    "plateau_checkpoint_bytes_written",
    # plateaud
    "plateau_jobs", "plateau_jobs_submitted_total",
    "plateau_job_restarts_total", "plateau_jobs_preempted_total",
    "plateau_job_queue_wait_seconds_bucket",
    "plateau_job_queue_wait_seconds_sum",
    "plateau_job_queue_wait_seconds_count",
    "plateau_schedule_latency_seconds_bucket",
    "plateau_schedule_latency_seconds_sum",
    "plateau_schedule_latency_seconds_count", "plateau_nodes",
    "plateau_devices", "plateau_job_restarts", "plateau_user_devices",
    "plateau_queue_oldest_wait_seconds", "up",
    # recording rules
    "job:plateau_device_memory_peak_ratio:max",
    "job:plateau_memory_peak_bytes:largest_component",
    "job:plateau_train_tokens_per_second:sum",
    "cluster:plateau_devices_allocated:ratio",
}
LABELS = {"job", "rank", "pool", "component", "layer", "expert", "tier",
          "state", "user", "owner", "le"}
# PromQL words that look like metric names: functions (always followed by
# "("), aggregation modifiers and operators.
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left",
                "group_right", "bool", "and", "or", "unless", "offset"}

HARDENING = ["NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp",
             "ProtectKernelTunables", "ProtectKernelModules",
             "ProtectControlGroups", "RestrictSUIDSGID", "LockPersonality",
             "RestrictNamespaces", "SystemCallArchitectures",
             "ReadWritePaths", "CapabilityBoundingSet",
             "RestrictAddressFamilies"]

BINARIES = ["plateaud", "plateau-worker", "plateau-data", "plateau"]
BAZEL_TARGETS = ["//daemon:plateaud", "//worker:plateau-worker",
                 "//worker:plateau-data", "//client:plateau"]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def parse_absl_flags(source):
    """{name: help text} of the ABSL_FLAG declarations in C++ source."""
    flags = {}
    for match in re.finditer(r"ABSL_FLAG\(\s*([\w:<>]+)\s*,\s*(\w+)\s*,",
                             source):
        kind, name = match.group(1), match.group(2)
        # The declaration ends with ");" at the end of a line (a help text
        # may contain ");" too).
        end = re.compile(r"\);[ \t]*$", re.M).search(source,
                                                       match.end()).start()
        literals = re.findall(r'"((?:[^"\\]|\\.)*)"',
                              source[match.end():end])
        if kind == "std::string":
            literals = literals[1:]  # the default value
        flags[name] = "".join(literals)
    return flags


def flags_in(text):
    """The flag names of every --name or --name=value in text."""
    return set(re.findall(r"(?<![\w-])--([a-z][a-z0-9_]*)", text))


def panels_of(dashboard):
    """Every panel, including those inside collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        for inner in panel.get("panels", []):
            yield inner


def queries_of(dashboard):
    """Every target's expr and every variable's query of the dashboard."""
    return ([target["expr"] for panel in panels_of(dashboard)
             for target in panel.get("targets", [])] +
            [v["definition"] for v in dashboard["templating"]["list"]])


def metric_names(expr):
    """Metric names an expression selects (functions, labels and PromQL
    keywords left out) and the label names it uses. Also takes a template
    variable's label_values(SELECTOR, LABEL)."""
    variable_query = re.fullmatch(r"label_values\((.*),\s*(\w+)\s*\)",
                                  expr.strip())
    if variable_query:
        names, labels = metric_names(variable_query.group(1))
        return names, labels | {variable_query.group(2)}
    labels = set()
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    for matchers in re.findall(r"\{([^}]*)\}", text):
        labels |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)",
                                 matchers))
    text = re.sub(r"\{[^}]*\}", " ", text)
    grouping = (r"\b(?:by|without|on|ignoring|group_left|group_right)"
                r"\s*\(([^)]*)\)")
    for names in re.findall(grouping, text):
        labels |= set(re.findall(r"[a-zA-Z_]\w*", names))
    text = re.sub(grouping, " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges: [5m], [$__rate_interval]
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][\w:]*", text):
        word = match.group(0)
        after = text[match.end():].lstrip()
        if after.startswith("(") or word in PROMQL_WORDS:
            continue
        if match.start() > 0 and text[match.start() - 1] in "$.":
            continue
        names.add(word)
    return names, labels


class GrafanaDashboardsTest(unittest.TestCase):

    def load(self, name):
        path = os.path.join(DEPLOY, "grafana", "dashboards", name)
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def test_the_dashboards_are_the_expected_ones(self):
        found = sorted(os.path.basename(path) for path in glob.glob(
            os.path.join(DEPLOY, "grafana", "dashboards", "*.json")))
        self.assertEqual(found, sorted(DASHBOARDS))

    def test_identity_time_and_refresh(self):
        for name, (uid, title, _) in DASHBOARDS.items():
            with self.subTest(dashboard=name):
                dashboard = self.load(name)
                self.assertEqual(dashboard["uid"], uid)
                self.assertEqual(dashboard["title"], title)
                self.assertEqual(dashboard["schemaVersion"], 38)
                self.assertEqual(dashboard["time"],
                                 {"from": "now-1h", "to": "now"})
                self.assertEqual(dashboard["refresh"], "10s")
                self.assertIsNone(dashboard.get("id"))

    def test_panels_have_unique_ids_and_fit_the_grid(self):
        for name in DASHBOARDS:
            with self.subTest(dashboard=name):
                panels = list(panels_of(self.load(name)))
                self.assertTrue(panels)
                ids = [panel["id"] for panel in panels]
                for panel_id in ids:
                    self.assertIsInstance(panel_id, int)
                self.assertEqual(len(ids), len(set(ids)), ids)
                cells = set()
                for panel in panels:
                    self.assertTrue(panel.get("title"), panel["id"])
                    self.assertTrue(panel.get("description"), panel["title"])
                    grid = panel["gridPos"]
                    self.assertGreater(grid["w"], 0, panel["title"])
                    self.assertGreater(grid["h"], 0, panel["title"])
                    self.assertLessEqual(grid["x"] + grid["w"], 24,
                                         panel["title"])
                    for x in range(grid["x"], grid["x"] + grid["w"]):
                        for y in range(grid["y"], grid["y"] + grid["h"]):
                            self.assertNotIn((x, y), cells,
                                             f"{panel['title']} overlaps")
                            cells.add((x, y))

    def test_every_panel_queries_the_plateau_datasource(self):
        for name in DASHBOARDS:
            dashboard = self.load(name)
            for panel in panels_of(dashboard):
                if panel["type"] == "row":
                    continue
                with self.subTest(dashboard=name, panel=panel["title"]):
                    self.assertEqual(panel["datasource"], DATASOURCE)
                    targets = panel["targets"]
                    self.assertTrue(targets)
                    ref_ids = [target["refId"] for target in targets]
                    self.assertTrue(all(ref_ids), ref_ids)
                    self.assertEqual(len(ref_ids), len(set(ref_ids)))
                    for target in targets:
                        self.assertTrue(target["expr"].strip())
                        self.assertIn("legendFormat", target)
                        self.assertEqual(
                            target.get("datasource", DATASOURCE), DATASOURCE)

    def test_template_variables(self):
        for name, (_, _, expected) in DASHBOARDS.items():
            with self.subTest(dashboard=name):
                variables = self.load(name)["templating"]["list"]
                self.assertEqual([v["name"] for v in variables], expected)
                for variable in variables:
                    self.assertEqual(variable["type"], "query")
                    self.assertEqual(variable["datasource"], DATASOURCE)
                    # 2: on time range change.
                    self.assertEqual(variable["refresh"], 2)
                    query = variable["query"]
                    if isinstance(query, dict):
                        query = query["query"]
                    self.assertTrue(query.startswith("label_values("), query)
                    self.assertEqual(query, variable["definition"])
                by_name = {v["name"]: v for v in variables}
                if "job" in by_name:
                    self.assertEqual(
                        by_name["job"]["definition"],
                        "label_values(plateau_memory_peak_bytes, job)")
                if "rank" in by_name:
                    # One rank at a time: a component stack summed over
                    # ranks would be measured against one device.
                    self.assertFalse(by_name["rank"]["includeAll"])
                    self.assertFalse(by_name["rank"]["multi"])

    def test_queries_use_only_defined_variables(self):
        for name in DASHBOARDS:
            dashboard = self.load(name)
            defined = {v["name"] for v in dashboard["templating"]["list"]}
            for text in queries_of(dashboard):
                with self.subTest(dashboard=name, expr=text):
                    used = set(re.findall(r"\$\{?(\w+)", text))
                    used |= set(re.findall(r"\[\[(\w+)", text))
                    self.assertLessEqual(used, defined | GRAFANA_BUILTINS)

    def test_queries_use_only_plateau_metrics_and_labels(self):
        for name in DASHBOARDS:
            dashboard = self.load(name)
            for text in queries_of(dashboard):
                with self.subTest(dashboard=name, expr=text):
                    names, labels = metric_names(text)
                    self.assertTrue(names)
                    self.assertLessEqual(names, METRICS)
                    self.assertLessEqual(labels, LABELS)

    def test_the_metric_parser(self):
        names, labels = metric_names(
            'topk(1, max by (component) (plateau_memory_peak_bytes'
            '{job="$job", pool="device"})) / on (job) '
            'rate(plateau_jobs_submitted_total[$__rate_interval])')
        self.assertEqual(names, {"plateau_memory_peak_bytes",
                                 "plateau_jobs_submitted_total"})
        self.assertEqual(labels, {"component", "job", "pool"})
        self.assertEqual(
            metric_names('label_values(plateau_expert_tokens_total'
                         '{job="$job"}, layer)'),
            ({"plateau_expert_tokens_total"}, {"job", "layer"}))


class GrafanaProvisioningTest(unittest.TestCase):

    def test_datasource(self):
        config = yaml.safe_load(read(os.path.join(
            DEPLOY, "grafana", "provisioning", "datasources", "plateau.yaml")))
        self.assertEqual(config["apiVersion"], 1)
        (source,) = config["datasources"]
        self.assertEqual(source["name"], "Prometheus")
        self.assertEqual(source["uid"], DATASOURCE["uid"])
        self.assertEqual(source["type"], DATASOURCE["type"])
        self.assertTrue(source["url"].startswith("http"))
        self.assertIs(source["isDefault"], True)

    def test_dashboard_provider(self):
        config = yaml.safe_load(read(os.path.join(
            DEPLOY, "grafana", "provisioning", "dashboards", "plateau.yaml")))
        self.assertEqual(config["apiVersion"], 1)
        (provider,) = config["providers"]
        self.assertEqual(provider["name"], "plateau")
        self.assertEqual(provider["type"], "file")
        self.assertEqual(provider["folder"], "Plateau")
        self.assertEqual(provider["options"]["path"],
                         "/var/lib/grafana/dashboards/plateau")


def unit_settings(text):
    """{(section, key): [values]} of a systemd unit file."""
    settings = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault((section, key.strip()), []).append(value.strip())
    return settings


def env_file_variables(text):
    """{name: value} of a systemd EnvironmentFile (continued lines joined,
    double quotes removed)."""
    variables = {}
    text = text.replace("\\\n", "")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        name, _, value = line.partition("=")
        variables[name.strip()] = value.strip().strip('"')
    return variables


class SystemdTest(unittest.TestCase):
    UNITS = {
        # unit: (binary, env file, variable, flags, state dir flag)
        "plateaud.service": ("plateaud", "plateaud.env", "PLATEAUD_FLAGS",
                             "daemon", "data_dir"),
        "plateau-worker.service": ("plateau-worker", "plateau-worker.env",
                                   "PLATEAU_WORKER_FLAGS", "worker",
                                   "work_dir"),
    }

    def flags(self, which):
        return DAEMON_FLAGS if which == "daemon" else WORKER_FLAGS

    def test_units_pass_systemd_analyze_verify(self):
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.skipTest("systemd-analyze is not installed")
        with tempfile.TemporaryDirectory(
                dir=os.environ.get("TEST_TMPDIR")) as directory:
            paths = []
            for unit in self.UNITS:
                # The binaries and the user "plateau" need not exist here.
                text = read(os.path.join(DEPLOY, "systemd", unit))
                text = re.sub(r"(?m)^ExecStart=.*$", "ExecStart=/bin/true",
                              text)
                text = re.sub(r"(?m)^(User|Group)=.*\n", "", text)
                path = os.path.join(directory, unit)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                paths.append(path)
            result = subprocess.run(
                [analyze, "verify", "--man=no"] + paths,
                capture_output=True, text=True, check=False)
            if "--man" in result.stderr and "unrecognized" in result.stderr:
                result = subprocess.run([analyze, "verify"] + paths,
                                        capture_output=True, text=True,
                                        check=False)
            output = result.stdout + result.stderr
            # Unknown keys and bad values are only warnings: fail on any
            # line about our units.
            ours = [line for line in output.splitlines()
                    if any(unit in line for unit in self.UNITS)]
            self.assertEqual(ours, [], output)
            self.assertEqual(result.returncode, 0, output)

    def test_units_run_the_binary_with_its_env_file(self):
        for unit, (binary, env, variable, _, _) in self.UNITS.items():
            with self.subTest(unit=unit):
                settings = unit_settings(
                    read(os.path.join(DEPLOY, "systemd", unit)))
                self.assertEqual(settings[("Service", "ExecStart")],
                                 [f"/usr/local/bin/{binary} ${variable}"])
                self.assertEqual(settings[("Service", "EnvironmentFile")],
                                 [f"/etc/plateau/{env}"])
                self.assertEqual(settings[("Service", "User")], ["plateau"])
                self.assertEqual(settings[("Service", "Restart")],
                                 ["on-failure"])
                self.assertIn("network-online.target",
                              settings[("Unit", "After")])
                self.assertIn("network-online.target",
                              settings[("Unit", "Wants")])
                self.assertIn(("Install", "WantedBy"), settings)

    def test_units_are_hardened(self):
        for unit in self.UNITS:
            with self.subTest(unit=unit):
                settings = unit_settings(
                    read(os.path.join(DEPLOY, "systemd", unit)))
                for key in HARDENING:
                    self.assertIn(("Service", key), settings, key)
                self.assertEqual(settings[("Service", "ProtectSystem")],
                                 ["strict"])
                self.assertEqual(
                    settings[("Service", "CapabilityBoundingSet")], [""])
        daemon = unit_settings(
            read(os.path.join(DEPLOY, "systemd", "plateaud.service")))
        self.assertEqual(daemon[("Service", "PrivateDevices")], ["true"])
        worker = unit_settings(
            read(os.path.join(DEPLOY, "systemd", "plateau-worker.service")))
        # The ranks open the GPUs' device files.
        self.assertNotIn(("Service", "PrivateDevices"), worker)
        self.assertEqual(worker[("Service", "KillMode")], ["mixed"])
        self.assertEqual(worker[("Service", "LimitMEMLOCK")], ["infinity"])

    def test_env_files_name_only_existing_flags(self):
        for unit, (_, env, variable, which, dir_flag) in self.UNITS.items():
            with self.subTest(env=env):
                text = read(os.path.join(DEPLOY, "systemd", env))
                flags = self.flags(which)
                self.assertTrue(flags)
                self.assertLessEqual(flags_in(text), set(flags))
                value = env_file_variables(text)[variable]
                self.assertLessEqual(flags_in(value), set(flags))
                # The flags name the unit's state directory.
                settings = unit_settings(
                    read(os.path.join(DEPLOY, "systemd", unit)))
                (state,) = settings[("Service", "StateDirectory")]
                self.assertIn(f"--{dir_flag}=/var/lib/{state}", value)

    def test_the_shipped_flags_run_with_tokens_and_tls(self):
        # plateaud refuses to listen off loopback without a tokens file
        # (unless --insecure_no_auth), and tokens without TLS there.
        daemon = env_file_variables(read(os.path.join(
            DEPLOY, "systemd", "plateaud.env")))["PLATEAUD_FLAGS"]
        self.assertIn("--listen=0.0.0.0:7070", daemon)
        for flag in ("tokens_file", "tls_cert", "tls_key"):
            self.assertIn(flag, flags_in(daemon))
        self.assertNotIn("insecure_no_auth", flags_in(daemon))
        self.assertNotIn("allow_plaintext_tokens", flags_in(daemon))
        worker = env_file_variables(read(os.path.join(
            DEPLOY, "systemd", "plateau-worker.env")))["PLATEAU_WORKER_FLAGS"]
        for flag in ("token_file", "ca_cert", "metrics_token_file"):
            self.assertIn(flag, flags_in(worker))
        self.assertNotIn("allow_plaintext_token", flags_in(worker))

    def test_env_files_document_every_service_flag(self):
        daemon = flags_in(read(os.path.join(DEPLOY, "systemd",
                                            "plateaud.env")))
        # --hash_token prints a hash and exits: not a service flag.
        self.assertEqual(daemon, set(DAEMON_FLAGS) - {"hash_token"})
        worker = flags_in(read(os.path.join(DEPLOY, "systemd",
                                            "plateau-worker.env")))
        agent = {name for name, help_text in WORKER_FLAGS.items()
                 if help_text.startswith("agent:")}
        self.assertTrue(agent)
        self.assertLessEqual(agent | {"device_memory", "threads"}, worker)


class KubernetesTest(unittest.TestCase):

    def manifests(self):
        return sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml")))

    def documents(self):
        for path in self.manifests():
            if os.path.basename(path) == "kustomization.yaml":
                continue
            for document in yaml.safe_load_all(read(path)):
                if document is not None:
                    yield os.path.basename(path), document

    def containers(self):
        for path, document in self.documents():
            spec = document.get("spec", {}).get("template", {}).get("spec")
            if spec:
                for container in spec.get("containers", []):
                    yield path, document, container

    def test_every_document_names_itself(self):
        documents = list(self.documents())
        self.assertTrue(documents)
        for path, document in documents:
            with self.subTest(file=path, kind=document.get("kind")):
                self.assertTrue(document.get("apiVersion"))
                self.assertTrue(document.get("kind"))
                self.assertTrue(document.get("metadata", {}).get("name"))
                if document["kind"] != "Namespace":
                    self.assertEqual(document["metadata"].get("namespace"),
                                     "plateau")

    def test_containers_run_with_tokens_and_tls(self):
        wanted = {"plateaud": {"tokens_file", "tls_cert", "tls_key"},
                  "plateau-worker": {"token_file", "ca_cert",
                                     "metrics_token_file"}}
        for path, document, container in self.containers():
            with self.subTest(container=container["name"]):
                flags = flags_in(" ".join(container["args"]))
                self.assertLessEqual(wanted[container["name"]], flags)
                self.assertFalse(flags & {"insecure_no_auth",
                                          "allow_plaintext_tokens",
                                          "allow_plaintext_token"})
                # Each file the flags name is in a mounted Secret.
                secrets = {volume["name"] for volume in
                           document["spec"]["template"]["spec"]["volumes"]
                           if "secret" in volume}
                mounts = {mount["mountPath"]: mount["name"]
                          for mount in container["volumeMounts"]}
                for argument in container["args"]:
                    flag, _, value = argument.partition("=")
                    if flag.lstrip("-") in wanted[container["name"]]:
                        folder = os.path.dirname(value)
                        self.assertIn(mounts.get(folder), secrets, argument)

    def test_containers_have_an_image_and_existing_flags(self):
        containers = list(self.containers())
        self.assertEqual(len(containers), 2)
        for path, document, container in containers:
            with self.subTest(file=path, container=container["name"]):
                self.assertTrue(container.get("image"))
                self.assertTrue(container.get("args"))
                binary = os.path.basename(container["command"][0])
                flags = {"plateaud": DAEMON_FLAGS,
                         "plateau-worker": WORKER_FLAGS}[binary]
                for arg in container["args"]:
                    self.assertTrue(arg.startswith("--"), arg)
                    self.assertLessEqual(flags_in(arg), set(flags), arg)

    def test_workloads(self):
        by_kind = {}
        for _, document in self.documents():
            by_kind.setdefault(document["kind"], []).append(document)
        (plateaud,) = by_kind["StatefulSet"]
        self.assertEqual(plateaud["spec"]["replicas"], 1)
        self.assertTrue(plateaud["spec"]["volumeClaimTemplates"])
        (worker,) = by_kind["DaemonSet"]
        pod = worker["spec"]["template"]["spec"]
        self.assertEqual(pod["nodeSelector"],
                         {"nvidia.com/gpu.present": "true"})
        self.assertIn("nvidia.com/gpu",
                      [t["key"] for t in pod["tolerations"]])
        self.assertIn("nvidia.com/gpu",
                      pod["containers"][0]["resources"]["limits"])
        claims = [v["persistentVolumeClaim"]["claimName"]
                  for v in pod["volumes"] if "persistentVolumeClaim" in v]
        self.assertEqual(claims, ["plateau-shared"])
        (shared,) = [c for c in by_kind["PersistentVolumeClaim"]
                     if c["metadata"]["name"] == "plateau-shared"]
        self.assertEqual(shared["spec"]["accessModes"], ["ReadWriteMany"])
        services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
        self.assertEqual(
            sorted(p["port"] for p in services["plateaud"]["spec"]["ports"]),
            [7070, 9400])

    def test_service_monitors_honor_labels(self):
        monitors = [document for _, document in self.documents()
                    if document["kind"] == "ServiceMonitor"]
        self.assertEqual(len(monitors), 2)
        services = [document for _, document in self.documents()
                    if document["kind"] == "Service"]
        for monitor in monitors:
            with self.subTest(monitor=monitor["metadata"]["name"]):
                self.assertEqual(monitor["apiVersion"],
                                 "monitoring.coreos.com/v1")
                self.assertTrue(monitor["spec"]["endpoints"])
                for endpoint in monitor["spec"]["endpoints"]:
                    # Plateau's "job" label is the Plateau job id.
                    self.assertIs(endpoint.get("honorLabels"), True)
                # Exactly one Service matches, so no target is scraped
                # twice.
                selector = monitor["spec"]["selector"]["matchLabels"]
                matching = [
                    s for s in services
                    if selector.items() <= s["metadata"]["labels"].items()]
                self.assertEqual(len(matching), 1)

    def test_kustomization_lists_every_manifest(self):
        kustomization = yaml.safe_load(
            read(os.path.join(DEPLOY, "k8s", "kustomization.yaml")))
        manifests = {os.path.basename(path) for path in self.manifests()}
        manifests.discard("kustomization.yaml")
        self.assertEqual(sorted(kustomization["resources"]),
                         sorted(manifests))


def dockerfile_instructions(text):
    """(INSTRUCTION, arguments) of a Dockerfile, continued lines joined."""
    text = re.sub(r"(?m)^\s*#.*\n", "", text)
    text = text.replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), " ".join(rest.split())))
    return instructions


class DockerfileTest(unittest.TestCase):

    def setUp(self):
        self.instructions = dockerfile_instructions(
            read(os.path.join(DEPLOY, "Dockerfile")))

    def test_stages(self):
        froms = [args for keyword, args in self.instructions
                 if keyword == "FROM"]
        self.assertEqual(froms, ["debian:12 AS build", "${BASE_IMAGE}"])
        # ARG before the first FROM: the default runtime base.
        self.assertEqual(self.instructions[0], ("ARG",
                                                "BASE_IMAGE=debian:12"))

    def test_builds_and_copies_the_four_binaries(self):
        runs = " ".join(args for keyword, args in self.instructions
                        if keyword == "RUN")
        for target in BAZEL_TARGETS:
            self.assertIn(target, runs)
        copies = [args.split() for keyword, args in self.instructions
                  if keyword == "COPY" and args.startswith("--from=build")]
        self.assertEqual(len(copies), 1)
        sources, destination = copies[0][1:-1], copies[0][-1]
        self.assertEqual(sorted(os.path.basename(s) for s in sources),
                         sorted(BINARIES))
        self.assertEqual(destination, "/usr/local/bin/")

    def test_runs_as_plateau(self):
        users = [args for keyword, args in self.instructions
                 if keyword == "USER"]
        self.assertEqual(users, ["plateau"])
        (entrypoint,) = [json.loads(args) for keyword, args
                         in self.instructions if keyword == "ENTRYPOINT"]
        self.assertEqual(len(entrypoint), 1)


if __name__ == "__main__":
    DEPLOY = os.path.dirname(os.path.abspath(sys.argv.pop(1)))
    DAEMON_FLAGS = parse_absl_flags(read(sys.argv.pop(1)))
    WORKER_FLAGS = parse_absl_flags(read(sys.argv.pop(1)))
    junit.main()
