"""plateau-worker train --world N end to end on the CPU backend: every
parallel layout trains like one rank (loss per step and weights from the
checkpoints), with tied embeddings too, a checkpoint of one layout resumes
on another, `plateau plan`'s default holds a router that sends every token
to one rank, a stop reaches every rank, a rank killed mid-step fails
the whole group with a clear error and no process left behind, and one
killed while writing a checkpoint leaves the checkpoint before it the
newest.

Usage (Bazel runs it, see BUILD): distributed_e2e_test.py PLATEAU_WORKER
PLATEAU_CLI
"""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
import safetensors_file  # noqa: E402
import synthetic_corpus  # noqa: E402

WORKER = None
CLI = None

# 4 layers and 4 experts split over pp = 2 and ep = 2; 8 sequences a step in
# 2 micro-batches split over up to ep x dp = 4 ranks. In fp32, the precision
# whose layouts agree to float32's rounding step after step; bf16's layouts
# are compared in engine/train:training_step_test (a weight that differs in
# its last float32 bit may round to the neighbouring bf16 value, and a
# routing choice may then flip).
SPEC = """\
name: distributed
resources: {{nodes: 1, devices_per_node: {world}}}
model: {{layers: 4, d_model: 64, heads: 4, experts: 4, top_k: 2,
        ffn_hidden: 128, vocab: 320, seq_len: 64{model_options}}}
parallel: {{ep: {ep}, pp: {pp}, dp: {dp}}}
schedules: {{{schedules}}}
optimizer: {{kind: {optimizer}, lr: 1.0e-2, warmup_steps: 2, grad_clip: 1.0}}
data: {{path: {data}, batch_tokens: 512}}
train: {{steps: {steps}, checkpoint_every: 3, eval_every: 3, seed: 5,
        micro_batches: 2}}
precision: fp32
"""

# The four memory schedules: dispatch chunks of at most 48 token copies per
# source and destination (several per layer); Ring-DTP splits the 320-word
# vocabulary into blocks of 256 and 64.
ALL_SCHEDULES = ("dispatch_chunk_tokens: 48, ring_dtp: true, sco: true, "
                 "optimizer_offload: stream")

# name: (ep, pp, dp, schedules); every one against the unscheduled one-rank
# run.
LAYOUTS = {
    "ep2": (2, 1, 1, ""),
    "pp2": (1, 2, 1, ""),
    "dp2": (1, 1, 2, ""),
    "ep2_dp2": (2, 1, 2, ""),
    "ep2_pp2": (2, 2, 1, ""),
    "ep2_pp2_ring_dtp": (2, 2, 1, "ring_dtp: true"),
    "dp2_offload_serial": (1, 1, 2, "optimizer_offload: serial"),
    "ep2_pp2_all_schedules": (2, 2, 1, ALL_SCHEDULES),
}


def to_bytes(text):
    """Bytes of a size as plateau prints it ("2.87 MiB")."""
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20,
                            "GiB": 1 << 30}[unit]


def read_json(path):
    with open(path) as file:
        return json.load(file)


class DistributedEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = synthetic_corpus.prepare_data(WORKER, cls.root)
        cls.reference_dir = os.path.join(cls.root, "one-rank")
        cls.reference = cls.train(cls.reference_dir, (1, 1, 1), steps=6)

    @classmethod
    def write_spec(cls, sizes, steps, schedules="", optimizer="adamw",
                   model_options=""):
        ep, pp, dp = sizes
        variant = zlib.crc32((schedules + optimizer + model_options).encode())
        path = os.path.join(cls.root,
                            f"spec-{ep}-{pp}-{dp}-{steps}-{variant}.yaml")
        with open(path, "w") as file:
            file.write(SPEC.format(world=ep * pp * dp, ep=ep, pp=pp, dp=dp,
                                   data=cls.data, steps=steps,
                                   schedules=schedules, optimizer=optimizer,
                                   model_options=model_options))
        return path

    @classmethod
    def train(cls, run_dir, sizes, steps, *flags, schedules="",
              optimizer="adamw", spec=None, log=None):
        """The run's summary; its output appended to `log` (a list) if
        given."""
        ep, pp, dp = sizes
        summary_path = run_dir + ".summary.json"
        result = subprocess.run(
            [WORKER, "train", spec or cls.write_spec(sizes, steps, schedules,
                                                     optimizer),
             f"--world={ep * pp * dp}", f"--run_dir={run_dir}",
             f"--summary_json={summary_path}", "--keep_checkpoints=0",
             "--threads=1", *flags], capture_output=True, text=True)
        if result.returncode != 0:
            raise AssertionError(
                f"training {sizes} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}")
        if log is not None:
            log.append(result.stdout + result.stderr)
        return read_json(summary_path)

    def copy_checkpoints(self, from_dir, run_dir, *steps):
        os.makedirs(os.path.join(run_dir, "checkpoints"))
        for step in steps:
            name = f"step-{step:08d}"
            shutil.copytree(os.path.join(from_dir, "checkpoints", name),
                            os.path.join(run_dir, "checkpoints", name))

    def export_reference_step_3(self, name):
        """The one-rank run's step-3 weights in the Hugging Face layout, in
        root/name; returns that directory."""
        exported = os.path.join(self.root, name)
        subprocess.run(
            [WORKER, "export", self.write_spec((1, 1, 1), 6),
             "--weights=" + os.path.join(self.reference_dir, "checkpoints",
                                         "step-00000003"),
             f"--output={exported}"], check=True, capture_output=True)
        return exported

    def assert_trains_like_one_rank(self, summary, run_dir, first_step=1):
        expected = self.reference["losses"][first_step - 1:]
        self.assertEqual(len(summary["losses"]), 6)
        # The real expert load, counted from the dispatch: per step and layer
        # the max/mean ratio, and per layer and expert the tokens received.
        for step, reference in zip(summary["steps"][first_step - 1:],
                                   self.reference["steps"][first_step - 1:]):
            self.assertEqual(len(step["expert_load_imbalance"]), 4)
            for ratio, expected_ratio in zip(
                    step["expert_load_imbalance"],
                    reference["expert_load_imbalance"]):
                self.assertAlmostEqual(ratio, expected_ratio, places=9)
        if first_step == 1:
            self.assertEqual(summary["expert_tokens"],
                             self.reference["expert_tokens"])
            # 6 steps x 512 tokens x top 2, in each of the 4 layers.
            for layer in summary["expert_tokens"]:
                self.assertEqual(sum(layer), 6 * 512 * 2)
        for step, (loss, reference) in enumerate(
                zip(summary["losses"][first_step - 1:], expected),
                start=first_step):
            self.assertLess(abs(loss - reference) / reference, 1e-5,
                            f"step {step}: {loss} vs {reference}")
        for validation, reference in zip(summary["validation"],
                                         self.reference["validation"]):
            self.assertLess(abs(validation["cross_entropy"] -
                                reference["cross_entropy"]), 1e-5)
        # The checkpoints this run wrote: a resumed run's first one is a copy
        # of the reference's, and would compare with itself.
        for number in (3, 6):
            if number < first_step:
                continue
            step = f"step-{number:08d}"
            weights = safetensors_file.read_checkpoint_tensors(
                os.path.join(run_dir, "checkpoints", step))
            reference = safetensors_file.read_checkpoint_tensors(
                os.path.join(self.reference_dir, "checkpoints", step))
            self.assertEqual(sorted(weights), sorted(reference))
            for name, values in weights.items():
                worst = max(abs(a - b) for a, b in zip(values, reference[name]))
                self.assertLess(worst, 1e-4, f"{step} {name}")

    def test_every_layout_trains_like_one_rank(self):
        for name, (ep, pp, dp, schedules) in LAYOUTS.items():
            with self.subTest(layout=name):
                run_dir = os.path.join(self.root, name)
                summary = self.train(run_dir, (ep, pp, dp), 6,
                                     schedules=schedules)
                self.assertTrue(summary["status"]["ok"], summary["status"])
                self.assert_trains_like_one_rank(summary, run_dir)

    def test_a_checkpoint_resumes_on_another_layout(self):
        # The one-rank run's step-3 checkpoint, finished by ep2 x pp2 with
        # every schedule (the offloaded optimizer takes the loaded weights).
        run_dir = os.path.join(self.root, "relayout")
        os.makedirs(os.path.join(run_dir, "checkpoints"))
        shutil.copytree(
            os.path.join(self.reference_dir, "checkpoints", "step-00000003"),
            os.path.join(run_dir, "checkpoints", "step-00000003"))
        summary = self.train(run_dir, (2, 2, 1), 6, "--resume",
                             schedules=ALL_SCHEDULES)
        self.assert_trains_like_one_rank(summary, run_dir, first_step=4)

    def test_sharded_checkpoints_reshard_on_resume(self):
        # ep2's step-3 checkpoint (each rank wrote its own shards) resumed
        # by dp2, pp2 and one rank: each within 1e-5 of ep2 going on
        # unchanged, each rank reading its shards and not the whole
        # checkpoint; by ep2 itself: bitwise.
        ep2_dir = os.path.join(self.root, "sharded-ep2")
        ep2 = self.train(ep2_dir, (2, 1, 1), 6)
        step_3 = os.path.join(ep2_dir, "checkpoints", "step-00000003")
        manifest = read_json(os.path.join(step_3, "MANIFEST.json"))
        self.assertEqual(manifest["version"], 2)
        self.assertEqual(
            sorted(listed["name"] for listed in manifest["files"]),
            ["model.rank-00000.safetensors", "model.rank-00001.safetensors",
             "optimizer.rank-00000.safetensors",
             "optimizer.rank-00001.safetensors", "state.json"])
        # Each rank wrote about half: ZeRO shards split the replicated
        # dense weights and state as well as the experts.
        sizes = {listed["name"]: listed["bytes"]
                 for listed in manifest["files"]}
        for kind in ("model", "optimizer"):
            ratio = (sizes[f"{kind}.rank-00000.safetensors"] /
                     sizes[f"{kind}.rank-00001.safetensors"])
            self.assertLess(abs(ratio - 1), 0.01, kind)
        for name, sizes in (("dp2", (1, 1, 2)), ("pp2", (1, 2, 1)),
                            ("one rank", (1, 1, 1)), ("ep2", (2, 1, 1))):
            with self.subTest(resumed_by=name):
                run_dir = os.path.join(self.root, "reshard-" + "-".join(
                    map(str, sizes)))
                self.copy_checkpoints(ep2_dir, run_dir, 3)
                log = []
                resumed = self.train(run_dir, sizes, 6, "--resume", log=log)
                for step in range(4, 7):
                    loss = resumed["losses"][step - 1]
                    expected = ep2["losses"][step - 1]
                    self.assertLess(abs(loss - expected) / expected, 1e-5,
                                    f"step {step}: {loss} vs {expected}")
                read = re.search(
                    r"resume: read ([\d.]+ \w+) of the checkpoint's "
                    r"([\d.]+ \w+) tensor data over (\d) ranks, at most "
                    r"([\d.]+ \w+) on one", log[0])
                self.assertIsNotNone(read, log[0])
                whole = to_bytes(read.group(2))
                most = to_bytes(read.group(4))
                ranks = int(read.group(3))
                # Blocks of 4 MiB hold this model's tensors whole: a rank
                # reads the chunks its shards touch, about 1/ranks of it.
                self.assertLess(most, whole * (0.6 if ranks == 2 else 1.01))
                if sizes == (2, 1, 1):
                    self.assertEqual(resumed["losses"][3:], ep2["losses"][3:])
                    for part in ("weights", "optimizer_state"):
                        self.assertEqual(
                            safetensors_file.read_checkpoint_tensors(
                                os.path.join(run_dir, "checkpoints",
                                             "step-00000006"), part),
                            safetensors_file.read_checkpoint_tensors(
                                os.path.join(ep2_dir, "checkpoints",
                                             "step-00000006"), part))

    def test_a_damaged_shard_resumes_from_the_checkpoint_before(self):
        # A flipped bit in rank 1's optimizer state of ep2's step-6
        # checkpoint: rank 1 finds it on resume and names it, every rank
        # goes back to step 3, and the run ends as the uninterrupted one.
        ep2_dir = os.path.join(self.root, "damaged-ep2")
        ep2 = self.train(ep2_dir, (2, 1, 1), 6)
        run_dir = os.path.join(self.root, "damaged-ep2-resumed")
        self.copy_checkpoints(ep2_dir, run_dir, 3, 6)
        damaged = os.path.join(run_dir, "checkpoints", "step-00000006",
                               "optimizer.rank-00001.safetensors")
        with open(damaged, "r+b") as file:
            file.seek(-100, os.SEEK_END)
            byte = file.read(1)
            file.seek(-100, os.SEEK_END)
            file.write(bytes([byte[0] ^ 1]))
        verified = subprocess.run(
            [WORKER, "checkpoint", "verify", os.path.dirname(damaged)],
            capture_output=True, text=True)
        self.assertEqual(verified.returncode, 1)
        self.assertRegex(verified.stderr,
                         r"optimizer\.rank-00001\.safetensors: bytes "
                         r"\[\d+, \d+\) of \S+ \(its elements "
                         r"\[\d+, \d+\)\) fail their CRC-32")
        log = []
        resumed = self.train(run_dir, (2, 1, 1), 6, "--resume", log=log)
        self.assertIn("resume: rank 1 passes over", log[0])
        self.assertIn("resume: continuing after step 3", log[0])
        self.assertEqual(resumed["losses"][3:], ep2["losses"][3:])

    def test_a_rank_killed_while_writing_keeps_the_checkpoint_before(self):
        # Rank 1 of ep2 ends after writing 3 chunks of its shard of step 6's
        # checkpoint, in the background while rank 0 trains step 7: the
        # group fails, step 3 stays the newest complete checkpoint, and the
        # resumed run ends exactly as the uninterrupted one.
        uninterrupted = self.train(os.path.join(self.root, "uncrashed-ep2"),
                                   (2, 1, 1), 9)
        run_dir = os.path.join(self.root, "crashed-ep2")
        result = subprocess.run(
            [WORKER, "train", self.write_spec((2, 1, 1), 9), "--world=2",
             f"--run_dir={run_dir}", "--keep_checkpoints=0", "--threads=1",
             "--comm_timeout=20s", "--exit_during_checkpoint=1:6:3"],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("rank 1 exited with code 86", result.stderr)
        checkpoints = os.path.join(run_dir, "checkpoints")
        names = sorted(os.listdir(checkpoints))
        self.assertEqual(names[-1], "step-00000003", names)
        self.assertTrue(
            any(name.startswith(".step-00000006.tmp-") for name in names),
            names)
        log = []
        resumed = self.train(run_dir, (2, 1, 1), 9, "--resume", log=log)
        self.assertIn("resume: continuing after step 3", log[0])
        self.assertEqual(resumed["losses"], uninterrupted["losses"])
        # The crashed write's files went with the next commit.
        self.assertEqual(sorted(os.listdir(checkpoints)),
                         ["step-00000003", "step-00000006", "step-00000009"])

    def test_skewadam_state_resumes_on_another_layout(self):
        # SkewAdam with bf16 expert momentum on one rank; its step-3
        # checkpoint (whole-model state: momentum widened to F32, factored
        # statistics saved once) finished by ep2 x dp2 with the lm_head split
        # over the expert ranks matches the one-rank run's last steps.
        optimizer = "skewadam, expert_momentum: bf16"
        one_rank_dir = os.path.join(self.root, "skewadam-one-rank")
        one_rank = self.train(one_rank_dir, (1, 1, 1), 6, optimizer=optimizer)
        state = safetensors_file.read_checkpoint_tensors(
            os.path.join(one_rank_dir, "checkpoints", "step-00000003"),
            "optimizer_state")
        self.assertEqual(len(state["layers.0.moe.experts.w1.exp_avg_sq_row"]),
                         4 * 128)
        self.assertEqual(len(state["lm_head.weight.exp_avg_sq_col"]), 64)
        self.assertEqual(len(state["layers.0.moe.experts.w1.exp_avg"]),
                         4 * 128 * 64)
        self.assertNotIn("layers.0.attn.wq.weight.exp_avg_sq", state)
        run_dir = os.path.join(self.root, "skewadam-relayout")
        os.makedirs(os.path.join(run_dir, "checkpoints"))
        shutil.copytree(
            os.path.join(one_rank_dir, "checkpoints", "step-00000003"),
            os.path.join(run_dir, "checkpoints", "step-00000003"))
        summary = self.train(run_dir, (2, 1, 2), 6, "--resume",
                             schedules="ring_dtp: true", optimizer=optimizer)
        for step in range(3, 6):
            loss, expected = summary["losses"][step], one_rank["losses"][step]
            self.assertLess(abs(loss - expected) / expected, 1e-4,
                            f"step {step + 1}: {loss} vs {expected}")
        # An AdamW run cannot take SkewAdam's state: the error names it.
        adamw_dir = os.path.join(self.root, "adamw-from-skewadam")
        os.makedirs(os.path.join(adamw_dir, "checkpoints"))
        shutil.copytree(
            os.path.join(one_rank_dir, "checkpoints", "step-00000003"),
            os.path.join(adamw_dir, "checkpoints", "step-00000003"))
        with self.assertRaisesRegex(AssertionError,
                                    r"exp_avg_sq: missing"):
            self.train(adamw_dir, (1, 1, 1), 6, "--resume")

    def test_init_from_loads_every_ranks_pieces(self):
        # The one-rank run's step-3 weights, exported to the Hugging Face
        # layout, started from by one rank and by ep2 x pp2 with every
        # schedule (each rank reading its own pieces of the directory,
        # the offloaded optimizer taking them): the two train alike.
        exported = self.export_reference_step_3("step-3-hf")
        runs = {}
        for sizes, schedules in (((1, 1, 1), ""), ((2, 2, 1), ALL_SCHEDULES)):
            spec = self.write_spec(sizes, 3, schedules)
            started = spec.replace(".yaml", "-init-from.yaml")
            with open(spec) as file, open(started, "w") as out:
                out.write(file.read() + f"init_from: {exported}\n")
            runs[sizes] = self.train(
                os.path.join(self.root, f"init-from-{sizes[0]}-{sizes[1]}"),
                sizes, 3, spec=started)
        one_rank, layout = runs[(1, 1, 1)], runs[(2, 2, 1)]
        # Started from trained weights: below the reference's step-1 loss.
        self.assertLess(one_rank["losses"][0], self.reference["losses"][0])
        for step, (loss, expected) in enumerate(
                zip(layout["losses"], one_rank["losses"]), start=1):
            self.assertLess(abs(loss - expected) / expected, 1e-5,
                            f"step {step}: {loss} vs {expected}")

    def test_the_default_plan_holds_a_collapsed_router(self):
        # The reference's step-3 weights with every router zeroed: each
        # token's two copies then go to experts 0 and 1, both on rank 0 of
        # ep 2, as an untrained router's can. `plateau plan` assumes such a
        # routing unless told a skew, onto each rank's own experts: the run
        # fits the device the plan says fits, rank 0's peak the plan's, and
        # its own row's, to the byte, and it runs out of memory on the
        # device a skew-2 plan said fits.
        exported = self.export_reference_step_3("collapsed-router-hf")
        weight_map = read_json(os.path.join(
            exported, "model.safetensors.index.json"))["weight_map"]
        routers = 0
        for file_name in sorted(set(weight_map.values())):
            routers += safetensors_file.zero_tensors(
                os.path.join(exported, file_name),
                lambda name: name.endswith(".block_sparse_moe.gate.weight"))
        self.assertEqual(routers, 4)
        spec = os.path.join(self.root, "collapsed-router.yaml")
        with open(self.write_spec((2, 1, 1), 1)) as file:
            text = file.read()
        self.assertIn("batch_tokens: 512", text)
        with open(spec, "w") as out:
            out.write(text.replace("batch_tokens: 512", "batch_tokens: 2048") +
                      f"init_from: {exported}\n")

        def planned_peak(*flags):
            result = subprocess.run(
                [CLI, "plan", spec, "--device_memory=1GiB", "-o", "json",
                 *flags], capture_output=True, text=True, check=True)
            plan = json.loads(result.stdout)["plan"]
            rank_0 = next(rank for rank in plan["planned"]["ranks"]
                          if rank.get("rank", 0) == 0)
            return (plan.get("routing_skew", 0),
                    int(plan["planned"]["device_peak_bytes"]),
                    int(rank_0["device_peak_bytes"]))

        skew, worst_peak, worst_rank_0 = planned_peak()
        self.assertEqual(skew, 0)
        self.assertEqual(worst_rank_0, worst_peak)
        skew, skewed_peak, _ = planned_peak("--routing_skew=2")
        self.assertEqual(skew, 2)
        self.assertGreater(worst_peak, skewed_peak * 1.1)

        def train_on_fitting_device(run_dir, peak):
            """Trains on the smallest device a plan of `peak` says fits (5%
            kept free)."""
            summary_path = run_dir + ".summary.json"
            device_kib = math.ceil(peak / 0.95 / 1024)
            return subprocess.run(
                [WORKER, "train", spec, "--world=2", f"--run_dir={run_dir}",
                 f"--summary_json={summary_path}", "--threads=1",
                 f"--device_memory={device_kib}KiB"], capture_output=True,
                text=True), summary_path

        result, summary_path = train_on_fitting_device(
            os.path.join(self.root, "collapsed-router"), worst_peak)
        self.assertEqual(result.returncode, 0, result.stderr)
        summary = read_json(summary_path)
        # 2048 tokens, each on experts 0 and 1, in each of the 4 layers.
        self.assertEqual(summary["expert_tokens"], [[2048, 2048, 0, 0]] * 4)
        self.assertEqual(summary["memory"]["pools"]["device"]["peak_bytes"],
                         worst_peak)
        result, _ = train_on_fitting_device(
            os.path.join(self.root, "collapsed-router-skew-2"), skewed_peak)
        self.assertEqual(result.returncode, 1)
        self.assertIn("device memory exhausted: dispatch asked for",
                      result.stderr)

    def test_tied_embeddings_over_every_layout(self):
        # Tied embeddings on one rank, then over ep2 x pp2 with every
        # schedule (the last stage's copy of its Ring-DTP rows of the first
        # stage's table, their gradient sent back each step), and the
        # one-rank run's step-3 checkpoint finished by pp2 x dp2 (the copy
        # made from the loaded table): the same losses, and checkpoints of
        # the same weights with no lm_head.
        tied = ", tie_embeddings: true"
        one_rank_dir = os.path.join(self.root, "tied-one-rank")
        one_rank = self.train(
            one_rank_dir, (1, 1, 1), 6,
            spec=self.write_spec((1, 1, 1), 6, model_options=tied))
        layout_dir = os.path.join(self.root, "tied-ep2-pp2")
        layout = self.train(
            layout_dir, (2, 2, 1), 6,
            spec=self.write_spec((2, 2, 1), 6, ALL_SCHEDULES,
                                 model_options=tied))
        resumed_dir = os.path.join(self.root, "tied-relayout")
        os.makedirs(os.path.join(resumed_dir, "checkpoints"))
        shutil.copytree(
            os.path.join(one_rank_dir, "checkpoints", "step-00000003"),
            os.path.join(resumed_dir, "checkpoints", "step-00000003"))
        resumed = self.train(
            resumed_dir, (1, 2, 2), 6, "--resume",
            spec=self.write_spec((1, 2, 2), 6, model_options=tied))
        self.assertNotEqual(one_rank["losses"], self.reference["losses"])
        for name, summary, first_step in (("ep2 x pp2", layout, 1),
                                          ("pp2 x dp2 resumed", resumed, 4)):
            for step in range(first_step, 7):
                loss = summary["losses"][step - 1]
                expected = one_rank["losses"][step - 1]
                self.assertLess(abs(loss - expected) / expected, 1e-5,
                                f"{name} step {step}: {loss} vs {expected}")
        for run_dir in (layout_dir, resumed_dir):
            weights = safetensors_file.read_checkpoint_tensors(
                os.path.join(run_dir, "checkpoints", "step-00000006"))
            reference = safetensors_file.read_checkpoint_tensors(
                os.path.join(one_rank_dir, "checkpoints", "step-00000006"))
            self.assertNotIn("lm_head.weight", weights)
            self.assertEqual(sorted(weights), sorted(reference))
            for name, values in weights.items():
                worst = max(abs(a - b) for a, b in zip(values, reference[name]))
                self.assertLess(worst, 1e-4, f"{run_dir} {name}")

    def test_sigterm_stops_every_rank_after_a_checkpoint(self):
        run_dir = os.path.join(self.root, "stopped")
        process = subprocess.Popen(
            [WORKER, "train", self.write_spec((2, 1, 1), 6), "--world=2",
             f"--run_dir={run_dir}", "--log_every=1", "--threads=1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in process.stdout:
            if line.startswith("[rank 0] step "):  # the first step is done
                process.send_signal(signal.SIGTERM)
                break
        _, stderr = process.communicate(timeout=120)
        self.assertEqual(process.returncode, 1, stderr)
        self.assertIn("stopped after step", stderr)
        checkpoints = os.listdir(os.path.join(run_dir, "checkpoints"))
        self.assertTrue(checkpoints)
        # Finished on one rank, it is the one-rank run.
        resumed = self.train(run_dir, (1, 1, 1), 6, "--resume")
        self.assert_trains_like_one_rank(resumed, run_dir, first_step=1)

    def test_a_killed_rank_fails_the_group_with_no_orphans(self):
        run_dir = os.path.join(self.root, "killed")
        process = subprocess.Popen(
            [WORKER, "train", self.write_spec((2, 1, 1), 100000), "--world=2",
             f"--run_dir={run_dir}", "--log_every=1", "--threads=1",
             "--comm_timeout=20s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in process.stdout:
            if line.startswith("[rank 0] step "):
                break
        with open(f"/proc/{process.pid}/task/{process.pid}/children") as file:
            ranks = [int(pid) for pid in file.read().split()]
        self.assertEqual(len(ranks), 2)
        # Rank 1 dies in the middle of whatever it is doing.
        rank_one = [pid for pid in ranks
                    if b"PLATEAU_RANK=1\0" in open(f"/proc/{pid}/environ",
                                                   "rb").read()]
        self.assertEqual(len(rank_one), 1)
        killed_at = time.monotonic()
        os.kill(rank_one[0], signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
        self.assertLess(time.monotonic() - killed_at, 30)
        self.assertEqual(process.returncode, 1, stderr)
        self.assertIn("rank 1 was killed by signal 9", stderr)
        for pid in ranks:
            self.assertFalse(os.path.exists(f"/proc/{pid}"),
                             f"rank process {pid} outlived the launcher")

    def test_world_must_match_the_spec(self):
        result = subprocess.run(
            [WORKER, "train", self.write_spec((2, 1, 1), 6), "--world=3",
             f"--run_dir={os.path.join(self.root, 'mismatch')}"],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 1)
        self.assertIn("--world 3 does not match the spec's parallel ep*pp*dp "
                      "= 2*1*1 = 2 ranks; pass --world 2", result.stderr)


if __name__ == "__main__":
    WORKER = os.path.abspath(sys.argv.pop(1))
    CLI = os.path.abspath(sys.argv.pop(1))
    junit.main()
