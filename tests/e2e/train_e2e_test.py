"""plateau-worker end to end on the CPU backend: data prepare, train,
checkpoints, resume (from a checkpoint and after SIGTERM), eval, the run
summary, and the errors a user sees for bad input.

Usage (Bazel runs it, see BUILD): train_e2e_test.py PLATEAU_WORKER EXAMPLE_SPEC
"""

import glob
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

import numpy
import sentencepiece

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
import synthetic_corpus  # noqa: E402

WORKER = None
EXAMPLE = None

SPEC = """\
name: e2e
model: {{layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,
        ffn_hidden: 128, vocab: 320, seq_len: 64{model_options}}}
optimizer: {{kind: adamw, lr: 1.0e-2, warmup_steps: 5, grad_clip: 1.0}}
data: {{path: {data}, batch_tokens: 512}}
train: {{steps: {steps}, checkpoint_every: 10, eval_every: 10, seed: 7}}
"""


def run(*arguments, check=True, env=None):
    result = subprocess.run([WORKER, *arguments], capture_output=True,
                            text=True, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"plateau-worker {' '.join(arguments)} failed "
                             f"({result.returncode}):\n{result.stderr}")
    return result


def read_json(path):
    with open(path) as file:
        return json.load(file)


def final_weights(run_dir):
    """The last checkpoint's weights as one safetensors file of whole
    tensors, consolidated beside the run directory (as
    <run_dir>.<step>.safetensors)."""
    checkpoints = sorted(name for name in os.listdir(
        os.path.join(run_dir, "checkpoints")) if name.startswith("step-"))
    path = f"{run_dir}.{checkpoints[-1]}.safetensors"
    run("checkpoint", "consolidate",
        os.path.join(run_dir, "checkpoints", checkpoints[-1]),
        f"--output={path}", "--overwrite")
    return path


def final_weights_digest(run_dir):
    path = final_weights(run_dir)
    with open(path, "rb") as file:
        return (path.rsplit(".", 2)[-2],
                hashlib.sha256(file.read()).hexdigest())


def safetensors_header(path):
    """A safetensors file's header, and where its data starts."""
    with open(path, "rb") as file:
        header_bytes = int.from_bytes(file.read(8), "little")
        return json.loads(file.read(header_bytes)), 8 + header_bytes


class TrainEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        corpus = os.path.join(cls.root, "corpus")
        synthetic_corpus.write_corpus(corpus, documents=300, seed=1)
        cls.data = os.path.join(cls.root, "data")
        result = run("data", "prepare", f"--input={corpus}",
                     f"--output={cls.data}", "--vocab=320")
        assert "prepared" in result.stdout, result.stdout
        cls.spec = cls.write_spec("spec.yaml", steps=40)
        # The reference run, every checkpoint kept.
        cls.reference_dir = os.path.join(cls.root, "reference")
        cls.reference = cls.train(cls.reference_dir, "--keep_checkpoints=0")

    @classmethod
    def write_spec(cls, name, steps, model_options=""):
        path = os.path.join(cls.root, name)
        with open(path, "w") as file:
            file.write(SPEC.format(data=cls.data, steps=steps,
                                   model_options=model_options))
        return path

    @classmethod
    def train(cls, run_dir, *flags, spec=None, env=None):
        summary_path = run_dir + ".summary.json"
        run("train", spec or cls.spec, f"--run_dir={run_dir}",
            f"--summary_json={summary_path}", *flags, env=env)
        return read_json(summary_path)

    def reference_precision(self):
        """What the reference run chose for precision: auto, as its
        checkpoints record it."""
        with open(os.path.join(self.reference_dir, "checkpoints",
                               "step-00000040", "state.json")) as file:
            return json.load(file)["precision"]

    def expect_resume_from_step_10_bitwise(self, run_dir, spec, summary):
        """A copy of a 20-step run (checkpoints every 10 steps, all kept)
        without its last checkpoint, resumed, ends bitwise as the run."""
        resumed_dir = run_dir + "_resumed"
        shutil.copytree(run_dir, resumed_dir)
        shutil.rmtree(os.path.join(resumed_dir, "checkpoints",
                                   "step-00000020"))
        resumed = self.train(resumed_dir, "--resume", spec=spec)
        self.assertEqual(resumed["losses"], summary["losses"])
        self.assertEqual(final_weights_digest(resumed_dir),
                         final_weights_digest(run_dir))

    def expect_export_refused(self, run_dir, spec, option):
        """Export of the run's last checkpoint fails naming `option`."""
        refused = run("export", spec, f"--weights={final_weights(run_dir)}",
                      f"--output={run_dir}_hf", check=False)
        self.assertEqual(refused.returncode, 1)
        self.assertIn(option, refused.stderr)
        self.assertFalse(os.path.exists(f"{run_dir}_hf"))

    def test_learns_the_corpus(self):
        losses = self.reference["losses"]
        self.assertEqual(len(losses), 40)
        self.assertLess(losses[-1], losses[0] - 2.0)
        index = read_json(os.path.join(self.data, "index.json"))
        validation = self.reference["validation"]
        self.assertEqual([v["step"] for v in validation], [10, 20, 30, 40])
        self.assertLess(validation[-1]["cross_entropy"],
                        0.6 * index["unigram_entropy_nats"])

    def test_model_options_reach_the_engine(self):
        # Written as the defaults, the same run; changed, each moves what
        # it drives: no load-balancing loss at coefficient 0, a router z-loss
        # added to the loss (the first step's cross-entropy unchanged, the
        # later ones moved by its gradient), and another first loss with
        # another rotary base or RMSNorm epsilon.
        defaults = self.train(
            os.path.join(self.root, "defaults"),
            spec=self.write_spec("defaults.yaml", steps=3,
                                 model_options=", rope_theta: 10000, "
                                 "aux_loss_coefficient: 0.01, "
                                 "rms_epsilon: 1.0e-5"))
        self.assertEqual(defaults["losses"], self.reference["losses"][:3])
        no_aux = self.train(
            os.path.join(self.root, "no_aux"),
            spec=self.write_spec("no_aux.yaml", steps=3,
                                 model_options=", aux_loss_coefficient: 0"))
        self.assertEqual([step["load_balancing"] for step in no_aux["steps"]],
                         [0.0, 0.0, 0.0])
        self.assertGreater(self.reference["steps"][0]["load_balancing"], 0)
        self.assertEqual([step["z_loss"] for step in defaults["steps"]],
                         [0.0, 0.0, 0.0])
        z_loss = self.train(
            os.path.join(self.root, "z_loss"),
            spec=self.write_spec("z_loss.yaml", steps=3,
                                 model_options=", z_loss_coefficient: 0.001"))
        self.assertEqual([step["cross_entropy"] for step in z_loss["steps"]][0],
                         self.reference["steps"][0]["cross_entropy"])
        for step in z_loss["steps"]:
            self.assertGreater(step["z_loss"], 0)
            self.assertAlmostEqual(step["loss"], step["cross_entropy"]
                                   + step["load_balancing"] + step["z_loss"])
        self.assertNotEqual(z_loss["losses"][1:], self.reference["losses"][1:3])
        long_base = self.train(
            os.path.join(self.root, "long_base"),
            spec=self.write_spec("long_base.yaml", steps=1,
                                 model_options=", rope_theta: 1000000"))
        self.assertNotEqual(long_base["steps"][0]["cross_entropy"],
                            self.reference["steps"][0]["cross_entropy"])
        # Qwen3's epsilon: in the exported config.json too.
        epsilon_dir = os.path.join(self.root, "epsilon")
        epsilon_spec = self.write_spec("epsilon.yaml", steps=1,
                                       model_options=", rms_epsilon: 1.0e-6")
        epsilon = self.train(epsilon_dir, spec=epsilon_spec)
        self.assertNotEqual(epsilon["steps"][0]["cross_entropy"],
                            self.reference["steps"][0]["cross_entropy"])
        run("export", epsilon_spec,
            f"--weights={final_weights(epsilon_dir)}",
            f"--output={epsilon_dir}_hf")
        self.assertEqual(read_json(os.path.join(
            epsilon_dir + "_hf", "config.json"))["rms_norm_eps"], 1e-6)

    def test_grouped_query_attention_trains(self):
        # kv_heads == heads is the model without the option, bit for bit;
        # one key and value head for the four query heads trains, and its
        # checkpoint holds wk and wv of one head's width.
        same = self.train(
            os.path.join(self.root, "kv_heads_4"),
            spec=self.write_spec("kv_heads_4.yaml", steps=3,
                                 model_options=", kv_heads: 4"))
        self.assertEqual(same["losses"], self.reference["losses"][:3])
        run_dir = os.path.join(self.root, "kv_heads_1")
        grouped = self.train(
            run_dir, spec=self.write_spec("kv_heads_1.yaml", steps=20,
                                          model_options=", kv_heads: 1"))
        self.assertLess(grouped["losses"][-1], grouped["losses"][0] - 1.0)
        self.assertNotEqual(grouped["losses"][:3],
                            self.reference["losses"][:3])
        header, _ = safetensors_header(final_weights(run_dir))
        self.assertEqual(header["layers.0.attn.wq.weight"]["shape"], [64, 64])
        self.assertEqual(header["layers.0.attn.wk.weight"]["shape"], [16, 64])
        self.assertEqual(header["layers.1.attn.wv.weight"]["shape"], [16, 64])

    def test_qk_norm_trains_and_exports_as_qwen3_moe(self):
        # qk_norm: false is the model without the option, bit for bit; with
        # QK-norm over two key-value heads the model learns, its checkpoint
        # holds a q and a k scale of head_dim a layer, and it exports as
        # Qwen3-MoE.
        same = self.train(
            os.path.join(self.root, "qk_norm_false"),
            spec=self.write_spec("qk_norm_false.yaml", steps=3,
                                 model_options=", qk_norm: false"))
        self.assertEqual(same["losses"], self.reference["losses"][:3])
        run_dir = os.path.join(self.root, "qk_norm")
        spec = self.write_spec("qk_norm.yaml", steps=20,
                               model_options=", kv_heads: 2, qk_norm: true")
        normed = self.train(run_dir, spec=spec)
        self.assertLess(normed["losses"][-1], normed["losses"][0] - 1.0)
        self.assertNotEqual(normed["losses"][:3],
                            self.reference["losses"][:3])
        weights = final_weights(run_dir)
        header, _ = safetensors_header(weights)
        for layer in (0, 1):
            for norm in ("q_norm", "k_norm"):
                self.assertEqual(
                    header[f"layers.{layer}.attn.{norm}.weight"]["shape"],
                    [16])
        output = os.path.join(self.root, "qk_norm_hf")
        result = run("export", spec, f"--weights={weights}",
                     f"--output={output}")
        self.assertIn("(Hugging Face Qwen3MoeForCausalLM)", result.stdout)
        self.assertEqual(read_json(os.path.join(output, "config.json"))
                         ["model_type"], "qwen3_moe")

    def test_bias_balancing_trains_and_resumes_bitwise(self):
        # Aux-loss-free balancing: no load-balancing loss, a bias a layer in
        # the checkpoint that the steps moved, and a run resumed from step
        # 10 (the biases coming back with the weights) ends bitwise as the
        # uninterrupted one. No Hugging Face architecture has the bias.
        run_dir = os.path.join(self.root, "bias")
        spec = self.write_spec(
            "bias.yaml", steps=20,
            model_options=", balancing: bias, bias_update_rate: 0.01")
        balanced = self.train(run_dir, "--keep_checkpoints=0", spec=spec)
        self.assertEqual([step["load_balancing"]
                          for step in balanced["steps"]], [0.0] * 20)
        self.assertLess(balanced["losses"][-1], balanced["losses"][0] - 1.0)
        weights = final_weights(run_dir)
        header, data_start = safetensors_header(weights)
        entry = header["layers.1.moe.router.expert_bias"]
        self.assertEqual(entry["shape"], [4])
        with open(weights, "rb") as file:
            file.seek(data_start + entry["data_offsets"][0])
            bias = numpy.frombuffer(file.read(16), dtype="<f4")
        # Each step moves each expert's bias by 0.01 or leaves it.
        self.assertTrue(numpy.any(bias != 0), bias)
        self.assertTrue(numpy.all(numpy.abs(bias) <= 0.2 + 1e-6), bias)

        self.expect_resume_from_step_10_bitwise(run_dir, spec, balanced)
        self.expect_export_refused(run_dir, spec, "model.balancing: bias")

    def test_sigmoid_router_trains(self):
        # The sigmoid router with the load-balancing loss (whose
        # probabilities are the normalised sigmoids) learns; no Hugging Face
        # architecture routes so.
        run_dir = os.path.join(self.root, "sigmoid")
        spec = self.write_spec("sigmoid.yaml", steps=20,
                               model_options=", router: sigmoid")
        routed = self.train(run_dir, spec=spec)
        self.assertLess(routed["losses"][-1], routed["losses"][0] - 1.0)
        self.assertGreater(routed["steps"][0]["load_balancing"], 0)
        self.assertNotEqual(routed["losses"][:3],
                            self.reference["losses"][:3])
        self.expect_export_refused(run_dir, spec, "model.router: sigmoid")

    def test_shared_experts_train_and_resume_bitwise(self):
        # Two shared experts beside the routed ones: they learn, are in the
        # checkpoint at their shapes, a run resumed from step 10 ends
        # bitwise as the uninterrupted one, and export names them as what no
        # Hugging Face architecture it writes has.
        run_dir = os.path.join(self.root, "shared")
        spec = self.write_spec(
            "shared.yaml", steps=20,
            model_options=", shared_experts: 2, shared_ffn_hidden: 48")
        shared = self.train(run_dir, "--keep_checkpoints=0", spec=spec)
        self.assertLess(shared["losses"][-1], shared["losses"][0] - 1.0)
        self.assertNotEqual(shared["losses"][:3],
                            self.reference["losses"][:3])
        header, _ = safetensors_header(final_weights(run_dir))
        d_model = header["layers.0.moe.router.weight"]["shape"][1]
        self.assertEqual(header["layers.1.moe.shared_experts.w1"]["shape"],
                         [96, d_model])
        self.assertEqual(header["layers.1.moe.shared_experts.w2"]["shape"],
                         [d_model, 96])

        self.expect_resume_from_step_10_bitwise(run_dir, spec, shared)
        self.expect_export_refused(run_dir, spec, "model.shared_experts")

    def test_tied_embeddings_train_resume_export_and_start_again(self):
        # tie_embeddings: false is the model without the option, bit for
        # bit. Tied, the model learns with no lm_head in its checkpoint, a
        # run resumed from step 10 ends bitwise as the uninterrupted one,
        # it exports with tie_word_embeddings and no lm_head, and a run
        # starts from that directory only with the spec tied too.
        same = self.train(
            os.path.join(self.root, "untied"),
            spec=self.write_spec("untied.yaml", steps=3,
                                 model_options=", tie_embeddings: false"))
        self.assertEqual(same["losses"], self.reference["losses"][:3])
        run_dir = os.path.join(self.root, "tied")
        spec = self.write_spec("tied.yaml", steps=20,
                               model_options=", tie_embeddings: true")
        tied = self.train(run_dir, "--keep_checkpoints=0", spec=spec)
        self.assertLess(tied["losses"][-1], tied["losses"][0] - 1.0)
        self.assertNotEqual(tied["losses"][:3], self.reference["losses"][:3])
        header, _ = safetensors_header(final_weights(run_dir))
        self.assertNotIn("lm_head.weight", header)
        self.assertEqual(header["embed.weight"]["shape"], [320, 64])
        self.expect_resume_from_step_10_bitwise(run_dir, spec, tied)

        exported = os.path.join(self.root, "tied_hf")
        run("export", spec, f"--weights={final_weights(run_dir)}",
            f"--output={exported}")
        self.assertIs(read_json(os.path.join(exported, "config.json"))
                      ["tie_word_embeddings"], True)
        weight_map = read_json(os.path.join(
            exported, "model.safetensors.index.json"))["weight_map"]
        self.assertNotIn("lm_head.weight", weight_map)
        self.assertIn("model.embed_tokens.weight", weight_map)
        started_spec = self.write_spec("tied_init.yaml", steps=3,
                                       model_options=", tie_embeddings: true")
        with open(started_spec, "a") as file:
            file.write(f"init_from: {exported}\n")
        started = self.train(os.path.join(self.root, "tied_init"),
                             spec=started_spec)
        # From the trained weights: near where the tied run ended, far
        # below where it began.
        self.assertLess(started["losses"][0],
                        tied["losses"][-1] +
                        0.25 * (tied["losses"][0] - tied["losses"][-1]))
        untied_spec = self.write_spec("untied_init.yaml", steps=3)
        with open(untied_spec, "a") as file:
            file.write(f"init_from: {exported}\n")
        refused = run("train", untied_spec,
                      f"--run_dir={os.path.join(self.root, 'untied_init')}",
                      check=False)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("tie_word_embeddings is true, but model.tie_embeddings "
                      "is false", refused.stderr)

    def test_data_prepare_reads_token_arrays(self):
        # The dataset's ids as nanoGPT and numpy store them (train split a
        # .npy, validation split a raw uint16 file of its own), with the
        # dataset's tokenizer: the same dataset, file for file. Without a
        # tokenizer, the same training; an id past the vocabulary: a clear
        # error, and no dataset.
        index = read_json(os.path.join(self.data, "index.json"))
        splits = {"train": b"", "validation": b""}
        for shard in index["shards"]:
            with open(os.path.join(self.data, shard["file"]), "rb") as file:
                splits[shard["split"]] += file.read()[24:]
        train = numpy.frombuffer(splits["train"], dtype="<u2")
        train_npy = os.path.join(self.root, "ids", "train.npy")
        os.makedirs(os.path.dirname(train_npy), exist_ok=True)
        numpy.save(train_npy, train)
        val_bin = os.path.join(self.root, "ids", "val.bin")
        with open(val_bin, "wb") as file:
            file.write(splits["validation"])
        arrays = os.path.join(self.root, "from_arrays")
        result = run("data", "prepare", f"--tokens={train_npy}",
                     f"--validation_tokens={val_bin}", "--token_dtype=uint16",
                     f"--output={arrays}",
                     "--tokenizer=" + os.path.join(self.data,
                                                   "tokenizer.model"))
        self.assertIn("tokens/s", result.stdout)
        self.assertEqual(sorted(os.listdir(arrays)),
                         sorted(os.listdir(self.data)))
        for name in os.listdir(self.data):
            with open(os.path.join(self.data, name), "rb") as expected, \
                    open(os.path.join(arrays, name), "rb") as actual:
                self.assertEqual(actual.read(), expected.read(), name)

        bare = os.path.join(self.root, "from_bare_arrays")
        run("data", "prepare", f"--tokens={train_npy}",
            f"--validation_tokens={val_bin}", "--token_dtype=uint16",
            f"--output={bare}", "--vocab=320",
            f"--separator_id={index['eos_id']}")
        self.assertNotIn("tokenizer.model", os.listdir(bare))
        with open(os.path.join(self.root, "bare.yaml"), "w") as file:
            file.write(SPEC.format(data=bare, steps=3, model_options=""))
        trained = self.train(os.path.join(self.root, "bare"),
                             spec=os.path.join(self.root, "bare.yaml"))
        self.assertEqual(trained["losses"], self.reference["losses"][:3])

        numpy.save(train_npy, numpy.append(train, numpy.uint16(320)))
        refused = os.path.join(self.root, "refused_arrays")
        result = run("data", "prepare", f"--tokens={train_npy}",
                     f"--output={refused}", "--vocab=320",
                     f"--separator_id={index['eos_id']}", check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"{train_npy}: id 320 at index {len(train)} is outside "
                      "the vocabulary of 320", result.stderr)
        self.assertFalse(os.path.exists(refused))

    def test_export_writes_the_tokenizer(self):
        # The dataset's tokenizer beside the weights, as transformers'
        # LlamaTokenizer reads it. SentencePiece (which those tools use)
        # reading the exported file encodes a training document to the ids
        # Plateau trained on, and config.json's ids are its special pieces.
        weights = final_weights(self.reference_dir)
        output = os.path.join(self.root, "tokenizer_hf")
        result = run("export", self.spec, f"--weights={weights}",
                     f"--output={output}")
        model_file = os.path.join(self.data, "tokenizer.model")
        self.assertIn(f"tokenizer: {model_file}", result.stdout)
        with open(os.path.join(output, "tokenizer.model"), "rb") as exported, \
                open(model_file, "rb") as original:
            self.assertEqual(exported.read(), original.read())
        tokenizer_config = read_json(
            os.path.join(output, "tokenizer_config.json"))
        for key, value in (("tokenizer_class", "LlamaTokenizer"),
                           ("add_bos_token", False), ("add_eos_token", False),
                           ("legacy", True), ("model_max_length", 64)):
            self.assertEqual(tokenizer_config[key], value, key)
        self.assertEqual(
            read_json(os.path.join(output, "special_tokens_map.json")),
            {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"})
        processor = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(output, "tokenizer.model"))
        config = read_json(os.path.join(output, "config.json"))
        index = read_json(os.path.join(self.data, "index.json"))
        self.assertEqual(config["eos_token_id"], index["eos_id"])
        for key in ("bos", "eos"):
            self.assertEqual(config[f"{key}_token_id"],
                             processor.piece_to_id(
                                 tokenizer_config[f"{key}_token"]), key)
        # The first training document, as Plateau tokenized it, up to its
        # end of document.
        train = next(shard for shard in index["shards"]
                     if shard["split"] == "train")
        with open(os.path.join(self.data, train["file"]), "rb") as file:
            ids = numpy.frombuffer(file.read()[24:], dtype="<u2").tolist()
        document = ids[:ids.index(index["eos_id"])]
        text = processor.decode(document)
        self.assertIn("the", text.lower())
        self.assertEqual(processor.encode(text), document)

        # --tokenizer=none: the weights alone; a file that is no
        # SentencePiece model: refused, nothing written.
        bare = os.path.join(self.root, "tokenizer_none_hf")
        result = run("export", self.spec, f"--weights={weights}",
                     f"--output={bare}", "--tokenizer=none")
        self.assertIn("no tokenizer (--tokenizer=none)", result.stdout)
        self.assertFalse(os.path.exists(os.path.join(bare, "tokenizer.model")))
        self.assertNotIn("eos_token_id",
                         read_json(os.path.join(bare, "config.json")))
        refused = os.path.join(self.root, "tokenizer_refused_hf")
        not_a_model = os.path.join(self.data, "index.json")
        result = run("export", self.spec, f"--weights={weights}",
                     f"--output={refused}", f"--tokenizer={not_a_model}",
                     check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"{not_a_model}: not a valid SentencePiece model",
                      result.stderr)
        self.assertIn("plateau-data hf-tokenizer", result.stderr)
        self.assertFalse(os.path.exists(refused))
        # A tokenizer with more ids than the model embeds: refused.
        larger = os.path.join(self.root, "larger_vocab")
        run("data", "prepare", f"--input={os.path.join(self.root, 'corpus')}",
            f"--output={larger}", "--vocab=400")
        result = run("export", self.spec, f"--weights={weights}",
                     f"--output={refused}",
                     f"--tokenizer={os.path.join(larger, 'tokenizer.model')}",
                     check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("the tokenizer has 400 ids, more than the 320 of "
                      "model.vocab", result.stderr)
        self.assertFalse(os.path.exists(refused))

    def test_init_from_starts_from_a_hugging_face_directory(self):
        # The reference run's last weights, exported: eval reads the
        # directory as it reads the checkpoint, bit for bit, and a run with
        # init_from starts where the reference ended, far below a random
        # start; resumed, it takes its checkpoint (bitwise as the
        # uninterrupted run), not the directory.
        checkpoint = os.path.join(self.reference_dir, "checkpoints",
                                  "step-00000040")
        exported = os.path.join(self.root, "init_hf")
        run("export", self.spec, f"--weights={checkpoint}",
            f"--output={exported}")
        evaluations = []
        for weights in (checkpoint, exported):
            summary_path = os.path.join(self.root, "init_eval.json")
            run("eval", self.spec, f"--weights={weights}",
                f"--tokens={self.data}", f"--summary_json={summary_path}")
            evaluations.append(read_json(summary_path)["evaluation"])
        self.assertEqual(evaluations[0], evaluations[1])

        def init_from_spec(name, directory, model_options=""):
            spec = self.write_spec(name, steps=20,
                                   model_options=model_options)
            with open(spec, "a") as file:
                file.write(f"init_from: {directory}\n")
            return spec

        def expect_refused(spec, message):
            refused = run(
                "train", spec,
                f"--run_dir={os.path.join(self.root, 'init_refused')}",
                check=False)
            self.assertEqual(refused.returncode, 1)
            self.assertIn(message, refused.stderr)

        spec = init_from_spec("init_from.yaml", exported)
        run_dir = os.path.join(self.root, "init_from")
        result = run("train", spec, f"--run_dir={run_dir}",
                     f"--summary_json={run_dir}.summary.json",
                     "--keep_checkpoints=0")
        self.assertIn(f"init_from: starting from {exported} "
                      "(MixtralForCausalLM, F32)\n", result.stdout)
        started = read_json(run_dir + ".summary.json")
        reference = self.reference["losses"]
        self.assertLess(started["losses"][0], reference[0] - 2.0)
        self.assertLess(started["losses"][0], reference[9])
        self.expect_resume_from_step_10_bitwise(run_dir, spec, started)

        # The data's tokenizer must be the directory's; the directory must
        # be the spec's model.
        other_tokenizer = os.path.join(self.root, "init_hf_other_tokenizer")
        shutil.copytree(exported, other_tokenizer)
        with open(os.path.join(other_tokenizer, "tokenizer.model"),
                  "wb") as file:
            file.write(b"another tokenizer")
        expect_refused(
            init_from_spec("init_from_other.yaml", other_tokenizer),
            f"init_from: {other_tokenizer}/tokenizer.model is not the "
            f"tokenizer data.path {self.data} was prepared with")
        expect_refused(
            init_from_spec("init_from_gqa.yaml", exported, ", kv_heads: 2"),
            f"init_from: {exported}/config.json is not the spec's model:\n"
            "  num_key_value_heads is 4, but model.kv_heads is 2")
        self.assertFalse(os.path.exists(os.path.join(
            self.root, "init_refused", "checkpoints", "step-00000010")))

    def test_data_prepare_takes_a_given_tokenizer(self):
        # The dataset's own tokenizer, given back: the same files. One that
        # is not a SentencePiece model: a clear error, and no dataset.
        corpus = os.path.join(self.root, "corpus")
        given = os.path.join(self.root, "given_tokenizer")
        result = run("data", "prepare", f"--input={corpus}",
                     f"--output={given}",
                     "--tokenizer=" + os.path.join(self.data,
                                                   "tokenizer.model"))
        self.assertIn("vocab 320", result.stdout)
        self.assertEqual(sorted(os.listdir(given)),
                         sorted(os.listdir(self.data)))
        for name in os.listdir(self.data):
            with open(os.path.join(self.data, name), "rb") as expected, \
                    open(os.path.join(given, name), "rb") as actual:
                self.assertEqual(actual.read(), expected.read(), name)
        not_a_model = os.path.join(corpus, sorted(os.listdir(corpus))[0])
        refused = os.path.join(self.root, "refused")
        result = run("data", "prepare", f"--input={corpus}",
                     f"--output={refused}", f"--tokenizer={not_a_model}",
                     check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("is not a SentencePiece model", result.stderr)
        self.assertFalse(os.path.exists(refused))

    def test_data_prepare_reads_json_lines(self):
        # The corpus's documents as one JSON Lines file, gzip-compressed:
        # the same dataset, file for file.
        corpus = os.path.join(self.root, "corpus")
        documents = []
        for directory, _, names in sorted(os.walk(corpus)):
            for name in sorted(names):
                with open(os.path.join(directory, name),
                          encoding="utf-8") as file:
                    documents.append(file.read())
        as_jsonl = os.path.join(self.root, "jsonl_corpus")
        os.makedirs(as_jsonl)
        with gzip.open(os.path.join(as_jsonl, "documents.jsonl.gz"), "wt",
                       encoding="utf-8") as file:
            for document in documents:
                file.write(json.dumps({"text": document}) + "\n")
        prepared = os.path.join(self.root, "jsonl_data")
        run("data", "prepare", f"--input={as_jsonl}", f"--output={prepared}",
            "--vocab=320")
        self.assertEqual(sorted(os.listdir(prepared)),
                         sorted(os.listdir(self.data)))
        for name in os.listdir(self.data):
            with open(os.path.join(self.data, name), "rb") as expected, \
                    open(os.path.join(prepared, name), "rb") as actual:
                self.assertEqual(actual.read(), expected.read(), name)

    def test_data_prepare_streams_the_corpus(self):
        # A JSON Lines corpus (gzip) and one eight times its size prepare in
        # about the same memory, and on one thread or two to the same
        # files: documents are read a batch at a time and encoded on every
        # thread. (Held whole, the larger corpus's text alone would take
        # about 14 MB more.)
        rng = random.Random(5)
        lines = [json.dumps({"text": " ".join(
            synthetic_corpus.sentence(rng) for _ in range(12))}) + "\n"
            for _ in range(5000)]
        tokenizer = os.path.join(self.data, "tokenizer.model")
        peaks = {}
        for copies in (1, 8):
            corpus = os.path.join(self.root, f"stream_corpus_{copies}")
            os.makedirs(corpus)
            with gzip.open(os.path.join(corpus, "documents.jsonl.gz"), "wt",
                           encoding="utf-8") as file:
                file.write("".join(lines * copies))
            for threads in (1, 2):
                output = os.path.join(self.root,
                                      f"stream_data_{copies}_{threads}")
                # plateau-data itself (which `plateau-worker data` execs),
                # under GNU time: a child's peak as Python sees it would
                # count the test's own memory, which it had when forked.
                data_tool = os.path.join(
                    os.path.dirname(os.path.realpath(WORKER)), "plateau-data")
                peak_path = output + ".peak"
                subprocess.run(
                    ["/usr/bin/time", "-f", "%M", "-o", peak_path, data_tool,
                     "prepare", f"--input={corpus}", f"--output={output}",
                     f"--tokenizer={tokenizer}", f"--threads={threads}",
                     "--shard_tokens=65536"], check=True, capture_output=True)
                with open(peak_path) as file:
                    peaks[copies, threads] = int(file.read())  # KiB
            one, two = (os.path.join(self.root, f"stream_data_{copies}_{t}")
                        for t in (1, 2))
            self.assertEqual(sorted(os.listdir(one)), sorted(os.listdir(two)))
            for name in os.listdir(one):
                with open(os.path.join(one, name), "rb") as a, \
                        open(os.path.join(two, name), "rb") as b:
                    self.assertEqual(a.read(), b.read(), name)
        index = read_json(os.path.join(self.root, "stream_data_8_2",
                                       "index.json"))
        self.assertEqual(index["train_documents"] +
                         index["validation_documents"], 8 * 5000)
        self.assertGreater(len(index["shards"]), 20)
        text_bytes = 7 * sum(len(line) for line in lines)
        self.assertGreater(text_bytes, 14 << 20)
        for threads in (1, 2):
            growth = peaks[8, threads] - peaks[1, threads]
            print(f"{threads} thread(s): peak {peaks[1, threads]} KiB, "
                  f"{peaks[8, threads]} KiB for 8 times the corpus")
            self.assertLess(growth * 1024, text_bytes / 4)

    def test_same_spec_gives_bitwise_the_same_run(self):
        again = self.train(os.path.join(self.root, "again"))
        self.assertEqual(again["losses"], self.reference["losses"])
        self.assertEqual(final_weights_digest(os.path.join(self.root, "again")),
                         final_weights_digest(self.reference_dir))

    def test_resume_from_a_checkpoint_matches_the_uninterrupted_run(self):
        resumed_dir = os.path.join(self.root, "resumed")
        shutil.copytree(self.reference_dir, resumed_dir)
        for step in ("00000020", "00000030", "00000040"):
            shutil.rmtree(os.path.join(resumed_dir, "checkpoints",
                                       "step-" + step))
        resumed = self.train(resumed_dir, "--resume")
        self.assertEqual(resumed["losses"], self.reference["losses"])
        self.assertEqual(resumed["validation"], self.reference["validation"])
        self.assertEqual(final_weights_digest(resumed_dir),
                         final_weights_digest(self.reference_dir))

    def test_a_resume_on_other_kernels_says_so(self):
        # A checkpoint records the kernels that made it and its precision.
        checkpoints = os.path.join(self.reference_dir, "checkpoints")
        with open(os.path.join(checkpoints, "step-00000030",
                               "state.json")) as file:
            state = json.load(file)
        self.assertRegex(state["kernels"], r"^cpu: simd (avx512|avx2|scalar), "
                         r"openblas \S+, onednn \S+$")
        self.assertIn(state["precision"], ("bf16", "fp32"))
        for name, env, other in [
                ("same", None, False),
                # As on a CPU without AVX2 (the level lowers OpenBLAS's
                # core and oneDNN's ISA with it).
                ("scalar", dict(os.environ, PLATEAU_SIMD="scalar"), True)]:
            with self.subTest(kernels=name):
                run_dir = os.path.join(self.root, "kernels-" + name)
                shutil.copytree(self.reference_dir, run_dir)
                shutil.rmtree(os.path.join(run_dir, "checkpoints",
                                           "step-00000040"))
                result = run("train", self.spec, f"--run_dir={run_dir}",
                             "--resume", env=env)
                # The run goes on in its checkpoints' precision.
                self.assertIn(f"precision: auto chose {state['precision']} "
                              "(auto: as the run's checkpoints were trained)",
                              result.stdout)
                said = ("resume: the checkpoint was made by other kernels ("
                        + state["kernels"] + "; these are cpu: simd scalar, "
                        "openblas Nehalem, onednn sse41): the run goes on, "
                        "but not bit for bit as it would have on those")
                if other and "simd scalar" not in state["kernels"]:
                    self.assertIn(said, result.stdout)
                else:
                    self.assertNotIn("other kernels", result.stdout)

    def test_a_cpu_below_avx2_trains_the_example_model(self):
        # Held below AVX2, as on a CPU without it: two steps of the example
        # job (its model, layout, schedules and optimizer) on this corpus,
        # in either precision, never an illegal instruction.
        with open(EXAMPLE) as file:
            example = file.read()
        for old, new in (("data/brown", self.data), ("vocab: 4096", "vocab: 320"),
                         ("steps: 300", "steps: 2")):
            self.assertIn(old, example)
            example = example.replace(old, new)
        spec = os.path.join(self.root, "example-scalar.yaml")
        with open(spec, "w") as file:
            file.write(example)
        env = dict(os.environ, PLATEAU_SIMD="scalar", DNNL_MAX_CPU_ISA="SSE41",
                   OPENBLAS_CORETYPE="Nehalem")
        for precision in ("bf16", "fp32"):
            with self.subTest(precision=precision):
                run_dir = os.path.join(self.root, "example-scalar-" + precision)
                result = run("train", spec, "--world=2", "--threads=1",
                             f"--precision={precision}",
                             f"--run_dir={run_dir}",
                             f"--summary_json={run_dir}.json", env=env)
                self.assertIn("backend: cpu (1 threads, scalar, bf16 products: "
                              "fixed-order scalar", result.stdout)
                losses = read_json(run_dir + ".json")["losses"]
                self.assertEqual(len(losses), 2)
                self.assertTrue(all(0 < loss < 20 for loss in losses), losses)

    def test_sigterm_checkpoints_and_resume_finishes_identically(self):
        run_dir = os.path.join(self.root, "interrupted")
        process = subprocess.Popen(
            [WORKER, "train", self.spec, f"--run_dir={run_dir}",
             "--log_every=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        for line in process.stdout:
            if line.startswith("step "):  # the first step is done
                process.send_signal(signal.SIGTERM)
                break
        _, stderr = process.communicate(timeout=120)
        self.assertEqual(process.returncode, 1, stderr)
        self.assertIn("stopped after step", stderr)
        resumed = self.train(run_dir, "--resume")
        self.assertEqual(resumed["losses"], self.reference["losses"])
        self.assertEqual(final_weights_digest(run_dir)[1],
                         final_weights_digest(self.reference_dir)[1])

    def test_eval_reproduces_the_final_validation_loss(self):
        summary_path = os.path.join(self.root, "eval.json")
        checkpoint = os.path.join(self.reference_dir, "checkpoints",
                                  "step-00000040")
        result = run("eval", self.spec, f"--weights={checkpoint}",
                     f"--tokens={self.data}",
                     f"--summary_json={summary_path}")
        self.assertIn("perplexity", result.stdout)
        summary = read_json(summary_path)
        evaluation = summary["evaluation"]
        self.assertEqual(evaluation["cross_entropy"],
                         self.reference["validation"][-1]["cross_entropy"])
        # Evaluation holds no gradients.
        device = summary["memory"]["pools"]["device"]["components"]
        self.assertEqual(device["gradients"]["peak_bytes"], 0)
        self.assertGreater(device["weights"]["peak_bytes"], 0)

        # A bare safetensors file and a raw uint32 token file work too.
        tokens_path = os.path.join(self.root, "tokens.bin")
        with open(tokens_path, "wb") as file:
            file.write(b"".join(i.to_bytes(4, "little")
                                for i in range(1, 300)))
        summary_path = os.path.join(self.root, "eval-raw.json")
        bare = os.path.join(self.root, "eval-raw.safetensors")
        run("checkpoint", "consolidate", checkpoint, f"--output={bare}")
        run("eval", self.spec, f"--weights={bare}",
            f"--tokens={tokens_path}", f"--summary_json={summary_path}")
        # 299 tokens: windows of 65 starting every 64 tokens, 4 of them.
        self.assertEqual(read_json(summary_path)["evaluation"]["windows"], 4)

    def test_summary_reports_memory_by_pool_and_component(self):
        memory = self.reference["memory"]
        self.assertEqual(memory["device_capacity_bytes"], 4 << 30)
        device = memory["pools"]["device"]
        components = device["components"]
        self.assertEqual(set(components), {
            "weights", "gradients", "optimizer", "dispatch", "vocab_projection",
            "checkpoint", "attention", "activations", "staging", "snapshot",
            "other"})
        parameters = components["weights"]["final_bytes"] // 4
        self.assertEqual(components["gradients"]["final_bytes"],
                         4 * parameters)
        self.assertEqual(components["optimizer"]["final_bytes"],
                         8 * parameters)
        # The (N, vocab) logits of a 512-token batch (in bf16 their product
        # writes them so), their logsumexp and the per-token losses. The
        # spec leaves the precision to auto: the run's checkpoints say which.
        logit_bytes = 2 if self.reference_precision() == "bf16" else 4
        self.assertEqual(components["vocab_projection"]["peak_bytes"],
                         512 * 320 * logit_bytes + 512 * 4 + 512 * 4)
        for name in ("dispatch", "attention", "activations", "checkpoint"):
            self.assertGreater(components[name]["peak_bytes"], 0, name)
            self.assertEqual(components[name]["final_bytes"], 0, name)
        self.assertGreaterEqual(device["peak_bytes"],
                                max(c["peak_bytes"]
                                    for c in components.values()))
        # Checkpoints stage their copy in host memory.
        self.assertGreater(memory["pools"]["host"]["components"]["staging"]
                           ["peak_bytes"], 0)
        self.assertEqual(sum(self.reference["optimizer_state_bytes"].values()),
                         8 * parameters)
        self.assertTrue(self.reference["status"]["ok"])
        self.assertGreater(self.reference["tokens_per_second"], 0)

    def test_too_little_device_memory_is_a_clear_error(self):
        summary_path = os.path.join(self.root, "small.json")
        result = run("train", self.spec,
                     f"--run_dir={os.path.join(self.root, 'small')}",
                     "--device_memory=1MiB", f"--summary_json={summary_path}",
                     check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("device memory exhausted", result.stderr)
        status = read_json(summary_path)["status"]
        self.assertFalse(status["ok"])
        self.assertEqual(status["code"], "RESOURCE_EXHAUSTED")

    def test_schedules_auto_fits_where_the_plain_step_does_not(self):
        # Four fifths of the plain step's measured device peak: too little
        # for it, enough once the planner chooses schedules.
        peak = self.reference["memory"]["pools"]["device"]["peak_bytes"]
        memory = f"--device_memory={peak * 4 // 5}"
        plain = run("train", self.write_spec("plain.yaml", steps=5),
                    f"--run_dir={os.path.join(self.root, 'plain')}", memory,
                    check=False)
        self.assertEqual(plain.returncode, 1)
        self.assertIn("device memory exhausted", plain.stderr)

        path = os.path.join(self.root, "auto.yaml")
        with open(path, "w") as file:
            file.write(SPEC.format(data=self.data, steps=5,
                                   model_options="") + "schedules: auto\n")
        summary = self.train(os.path.join(self.root, "auto"), memory,
                             spec=path)
        self.assertTrue(summary["status"]["ok"])
        self.assertLessEqual(summary["memory"]["pools"]["device"]["peak_bytes"],
                             peak * 4 // 5)
        result = run("train", path, "--device_memory=64KiB", check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("schedules: auto: no choice of schedules fits",
                      result.stderr)

    def test_bad_input_names_what_is_wrong(self):
        bad_spec = os.path.join(self.root, "bad.yaml")
        with open(bad_spec, "w") as file:
            file.write(SPEC.format(data=self.data, steps=10,
                                   model_options="")
                       .replace("heads: 4", "heads: 5"))
        result = run("train", bad_spec, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("model.heads", result.stderr)

        result = run("train", self.spec, "--device_memory=lots", check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("--device_memory", result.stderr)

        # Weights of another model shape.
        other = os.path.join(self.root, "other.yaml")
        with open(other, "w") as file:
            file.write(SPEC.format(data=self.data, steps=10,
                                   model_options="")
                       .replace("d_model: 64", "d_model: 32"))
        result = run("eval", other, "--weights=" + os.path.join(
            self.reference_dir, "checkpoints", "step-00000040"),
            f"--tokens={self.data}", check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("embed.weight: shape [320, 64], expected [320, 32]",
                      result.stderr)

        result = run("frobnicate", check=False)
        self.assertEqual(result.returncode, 2)

    def test_the_cuda_backend_trains_or_says_there_is_no_gpu(self):
        summary_path = os.path.join(self.root, "cuda.json")
        result = run("train", self.write_spec("cuda.yaml", steps=2),
                     f"--run_dir={os.path.join(self.root, 'cuda')}",
                     "--backend=cuda", f"--summary_json={summary_path}",
                     check=False)
        if result.returncode == 0:  # a machine with a GPU
            self.assertIn("backend: cuda", result.stdout)
            self.assertTrue(read_json(summary_path)["status"]["ok"])
            return
        self.assertEqual(result.returncode, 1)
        self.assertIn("no CUDA device", result.stderr)
        self.assertEqual(read_json(summary_path)["status"]["code"],
                         "FAILED_PRECONDITION")

    def test_the_log_says_which_precision_the_run_computes_in(self):
        # The spec leaves precision out (auto): the run chooses by this
        # CPU's measured bf16 products and says so, then runs it.
        spec = self.write_spec("precision.yaml", steps=1)
        result = run("train", spec, "--run_dir=" + os.path.join(
            self.root, "precision-auto"))
        chose = re.search(r"precision: auto chose (bf16|fp32) \((auto: bf16 "
                          r"products ([0-9.]+)x fp32's on this machine[^\n]*)"
                          r"\)\n", result.stdout)
        self.assertIsNotNone(chose, result.stdout)
        precision, reason, speedup = chose.groups()
        self.assertEqual(precision,
                         "bf16" if float(speedup) >= 1.25 else "fp32")
        self.assertIn(f"precision: {precision} ", result.stdout)
        self.assertIn(f"({reason})\n", result.stdout)
        # The backend line names what runs the bf16 products here (their
        # speed depends on it: docs/BENCHMARKS.md).
        self.assertRegex(
            result.stdout,
            r"backend: cpu \(.*, bf16 products: (oneDNN gemm:\S+|"
            r"fixed-order (avx2|scalar)), device memory ")
        # --precision chooses for auto; a spec's own precision is kept.
        for flags, said in [(["--precision=bf16"], "precision: bf16 "),
                            (["--precision=fp32"], "precision: fp32 ")]:
            result = run("train", spec, *flags, "--run_dir=" + os.path.join(
                self.root, "precision" + flags[0][-5:]))
            self.assertIn(said, result.stdout)
            self.assertNotIn("auto chose", result.stdout)
        with open(spec, "a") as file:
            file.write("precision: fp32\n")
        result = run("train", spec, "--run_dir=" + os.path.join(
            self.root, "precision-fp32"))
        self.assertRegex(result.stdout, r"precision: fp32 .*\(set in the "
                         r"spec\)\n")
        refused = run("train", spec, "--precision=bf16", check=False)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("--precision bf16 contradicts the spec's precision: "
                      "fp32", refused.stderr)

    def test_bad_backend_flags_name_the_flag(self):
        for flags, named in [(["--backend=tpu"], "--backend 'tpu'"),
                             (["--backend=cuda", "--cuda_devices=one"],
                              "--cuda_devices 'one'"),
                             (["--backend=cuda", "--cuda_matmul=fp8"],
                              "--cuda_matmul 'fp8'")]:
            for command in ["train", "eval"]:
                result = run(command, self.spec, *flags, check=False)
                self.assertEqual(result.returncode, 1, [command, *flags])
                self.assertIn(named, result.stderr)

    def test_eval_runs_on_the_backend_it_is_given(self):
        checkpoint = os.path.join(self.reference_dir, "checkpoints",
                                  "step-00000040")
        result = run("eval", self.spec, f"--weights={checkpoint}",
                     f"--tokens={self.data}", "--backend=cuda", check=False)
        if result.returncode == 0:  # a machine with a GPU
            self.assertIn("perplexity", result.stdout)
            return
        self.assertEqual(result.returncode, 1)
        self.assertIn("no CUDA device", result.stderr)

    def test_an_agent_offering_cuda_without_a_gpu_stops_saying_why(self):
        # Where the kernel has a GPU, the agent starts and keeps trying to
        # reach plateaud; without one it must stop at once, never hang.
        if glob.glob("/dev/nvidia[0-9]*"):
            self.skipTest("this machine has a GPU")
        try:
            result = subprocess.run(
                [WORKER, "--coordinator=127.0.0.1:1", "--devices=cuda",
                 f"--work_dir={self.root}"],
                capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("the agent hung instead of refusing --devices cuda")
        self.assertEqual(result.returncode, 1)
        self.assertIn("--devices cuda", result.stderr)
        self.assertIn("--devices cpu:N", result.stderr)

    def test_a_fresh_run_never_overwrites_checkpoints(self):
        run_dir = os.path.join(self.root, "existing")
        shutil.copytree(self.reference_dir, run_dir)
        before = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
        result = run("train", self.spec, f"--run_dir={run_dir}", check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("already holds checkpoints", result.stderr)
        self.assertIn("pass --resume", result.stderr)
        self.assertEqual(
            sorted(os.listdir(os.path.join(run_dir, "checkpoints"))), before)


if __name__ == "__main__":
    WORKER = os.path.abspath(sys.argv.pop(1))
    EXAMPLE = os.path.abspath(sys.argv.pop(1))
    junit.main()
