"""plateau-worker export: Plateau's weights in the Hugging Face layout;
and the other way, a Hugging Face directory as the engine's weights.

Exports random weights of a grouped-query model through plateau-worker, in
several shards, reads the directory back as transformers would with an
independent MixtralForCausalLM (hf_mixtral.py), and compares its loss on a
batch, in float64, with Plateau's model (plateau_moe.py, float64) within
1e-6 relative, and with the engine itself (model_gradients, float32) within
the parity test's 2e-5. The same for a model with QK-norm, which exports as
Qwen3MoeForCausalLM (hf_qwen3_moe.py), and for tied embeddings in either
(tie_word_embeddings, no lm_head). Also: the tensors are Plateau's bit for
bit, the index covers the shards, and bad input is refused with nothing
written.

The import: a Qwen3-MoE directory as transformers saves one (BF16, one
model.safetensors, config keys Plateau does not use) written here from the
architecture's public shapes, evaluated by the engine (`eval --weights
DIR`, the loader init_from uses) with the loss the independent reader
computes in float64 from the same BF16 values.

Usage: hf_export_test.py PLATEAU_WORKER MODEL_GRADIENTS
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import hf_mixtral  # noqa: E402
import hf_qwen3_moe  # noqa: E402
import junit  # noqa: E402
import plateau_moe  # noqa: E402

WORKER = None
MODEL_GRADIENTS = None

SPEC = """\
name: export
model: {{layers: {c.layers}, d_model: {c.d_model}, heads: {c.heads},
        kv_heads: {c.kv_heads}, experts: {c.experts}, top_k: {c.top_k},
        ffn_hidden: {c.ffn_hidden}, vocab: {c.vocab}, seq_len: {c.seq_len},
        rope_theta: {c.rope_theta}, qk_norm: {qk_norm},
        tie_embeddings: {tie_embeddings}}}
data: {{path: unused, batch_tokens: {c.seq_len}}}
train: {{steps: 1}}
"""


def export(*arguments):
    return subprocess.run([WORKER, "export", *arguments], capture_output=True,
                          text=True)


def spec_text(config):
    return SPEC.format(c=config, qk_norm=str(config.qk_norm).lower(),
                       tie_embeddings=str(config.tie_embeddings).lower())


def exported_case(test_class, config, seed):
    """Random weights of `config` exported in several shards: sets the
    class's root, config, params, tokens, weights, spec and output."""
    test_class.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    test_class.config = config
    generator = torch.Generator().manual_seed(seed)
    test_class.params = plateau_moe.random_parameters(config, generator,
                                                      scale=0.3)
    test_class.tokens = torch.randint(0, config.vocab, (2, config.seq_len + 1),
                                      generator=generator)
    test_class.weights = os.path.join(test_class.root, "weights.safetensors")
    plateau_moe.write_safetensors(test_class.weights, test_class.params)
    test_class.spec = os.path.join(test_class.root, "spec.yaml")
    with open(test_class.spec, "w") as file:
        file.write(spec_text(config))
    test_class.output = os.path.join(test_class.root, "hf")
    result = export(test_class.spec, f"--weights={test_class.weights}",
                    f"--output={test_class.output}", "--max_shard_bytes=40000")
    assert result.returncode == 0, result.stderr
    return result.stdout


def check_losses(test, reader):
    """The exported directory's float64 loss, read by `reader` (hf_mixtral or
    hf_qwen3_moe), against Plateau's float64 model and the engine's."""
    config, state = reader.load(test.output)
    exported = reader.causal_lm_loss(config, state,
                                     test.tokens.to(torch.int64))
    p64 = {name: value.to(torch.float64)
           for name, value in test.params.items()}
    plateau, _, _ = plateau_moe.loss(p64, test.tokens.to(torch.int64),
                                     test.config)
    relative = abs(exported.item() - plateau.item()) / plateau.item()
    print(f"exported {exported.item():.12f}, Plateau's model "
          f"{plateau.item():.12f} in float64 ({relative:.1e} relative)")
    test.assertLess(relative, 1e-6)

    tokens_path = os.path.join(test.root, "tokens.bin")
    test.tokens.numpy().astype("<u4").tofile(tokens_path)
    c = test.config
    engine = json.loads(subprocess.run(
        [MODEL_GRADIENTS, f"--layers={c.layers}", f"--d_model={c.d_model}",
         f"--heads={c.heads}", f"--kv_heads={c.kv_heads}",
         f"--experts={c.experts}", f"--top_k={c.top_k}",
         f"--ffn_hidden={c.ffn_hidden}", f"--vocab={c.vocab}",
         f"--seq_len={c.seq_len}", f"--rope_theta={c.rope_theta!r}",
         f"--qk_norm={str(c.qk_norm).lower()}",
         f"--tie_embeddings={str(c.tie_embeddings).lower()}",
         "--sequences=2", f"--weights={test.weights}",
         f"--tokens={tokens_path}",
         f"--gradients={os.path.join(test.root, 'gradients.safetensors')}"],
        check=True, capture_output=True, text=True).stdout)
    engine_relative = (abs(engine["cross_entropy"] - exported.item())
                       / exported.item())
    print(f"the engine's float32 cross-entropy "
          f"{engine['cross_entropy']:.7f} ({engine_relative:.1e})")
    test.assertLess(engine_relative, 2e-5)


class HuggingFaceExportTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        # Two query heads a key-value head, Qwen3's rotary base, and a
        # sequence longer than the attention kernel's 128-token blocks.
        stdout = exported_case(
            cls, plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150, kv_heads=2,
                                    rope_theta=5e5), 11)
        assert "(Hugging Face MixtralForCausalLM)" in stdout, stdout

    def test_the_exported_model_has_plateaus_loss(self):
        check_losses(self, hf_mixtral)

    def test_the_layout_is_transformers_and_the_values_plateaus(self):
        with open(os.path.join(self.output, "config.json")) as file:
            config = json.load(file)
        self.assertEqual(config["architectures"], ["MixtralForCausalLM"])
        self.assertEqual(config["model_type"], "mixtral")
        self.assertEqual(
            (config["hidden_size"], config["num_attention_heads"],
             config["num_key_value_heads"], config["num_local_experts"],
             config["num_experts_per_tok"], config["intermediate_size"],
             config["rope_theta"], config["tie_word_embeddings"],
             config["rms_norm_eps"], config["router_aux_loss_coef"]),
            (32, 4, 2, 4, 2, 24, 5e5, False, 1e-5, 0.01))
        with open(os.path.join(self.output,
                               "model.safetensors.index.json")) as file:
            index = json.load(file)
        shards = sorted(set(index["weight_map"].values()))
        self.assertGreater(len(shards), 2)
        self.assertEqual(shards[0],
                         f"model-00001-of-{len(shards):05d}.safetensors")
        self.assertEqual(sorted(os.listdir(self.output)),
                         sorted(shards + ["config.json",
                                          "model.safetensors.index.json"]))
        _, state = hf_mixtral.load(self.output, dtype=torch.float32)
        self.assertEqual(index["metadata"]["total_size"],
                         sum(4 * value.numel() for value in state.values()))
        # The embedding, the final norm and the head, and 2 layers x (2
        # norms, 4 projections, the gate, 4 experts x 3 matrices).
        self.assertEqual(len(state), 3 + 2 * (2 + 4 + 1 + 12))
        p = self.params
        for hf_name, value in (
                ("model.layers.1.self_attn.k_proj.weight",
                 p["layers.1.attn.wk.weight"]),
                ("model.layers.0.block_sparse_moe.experts.3.w2.weight",
                 p["layers.0.moe.experts.w2"][3]),
                ("model.layers.1.block_sparse_moe.experts.2.w1.weight",
                 p["layers.1.moe.experts.w1"][2]),
                ("model.layers.0.post_attention_layernorm.weight",
                 p["layers.0.moe_norm.weight"]),
                ("model.embed_tokens.weight", p["embed.weight"])):
            self.assertTrue(torch.equal(state[hf_name], value), hf_name)

    def test_bad_input_is_refused_and_nothing_written(self):
        other = os.path.join(self.root, "other.yaml")
        with open(other, "w") as file:
            file.write(spec_text(self.config).replace("kv_heads: 2",
                                                      "kv_heads: 4"))
        refused = os.path.join(self.root, "refused")
        result = export(other, f"--weights={self.weights}",
                        f"--output={refused}")
        self.assertEqual(result.returncode, 1)
        self.assertIn("does not match the model:\n  "
                      "layers.0.attn.wk.weight: shape [16, 32], expected "
                      "[32, 32]", result.stderr)
        self.assertFalse(os.path.exists(refused))
        result = export(self.spec, f"--weights={self.weights}",
                        f"--output={self.output}")
        self.assertEqual(result.returncode, 1)
        self.assertIn(self.output, result.stderr)
        result = export(self.spec, f"--weights={self.weights}",
                        f"--output={refused}", "--format=gguf")
        self.assertEqual(result.returncode, 1)
        self.assertIn("unknown --format 'gguf'; expected hf", result.stderr)
        self.assertFalse(os.path.exists(refused))
        self.assertEqual(
            sorted(name for name in os.listdir(self.root)
                   if name.startswith(".")), [])
        # A checkpoint of the model without QK-norm is not the Qwen3-MoE's.
        with open(other, "w") as file:
            file.write(spec_text(self.config).replace("qk_norm: false",
                                                      "qk_norm: true"))
        result = export(other, f"--weights={self.weights}",
                        f"--output={refused}")
        self.assertEqual(result.returncode, 1)
        self.assertIn("layers.0.attn.q_norm.weight: missing", result.stderr)
        self.assertFalse(os.path.exists(refused))


class TiedEmbeddingsExportTest(unittest.TestCase):
    """Tied embeddings export with tie_word_embeddings and no lm_head, as
    save_pretrained writes them, for each architecture."""

    def test_each_architecture(self):
        for qk_norm, reader, seed in ((False, hf_mixtral, 25),
                                      (True, hf_qwen3_moe, 26)):
            with self.subTest(qk_norm=qk_norm):
                exported_case(
                    self, plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                             kv_heads=2, qk_norm=qk_norm,
                                             tie_embeddings=True), seed)
                with open(os.path.join(self.output, "config.json")) as file:
                    self.assertIs(json.load(file)["tie_word_embeddings"],
                                  True)
                _, state = reader.load(self.output, dtype=torch.float32)
                self.assertNotIn("lm_head.weight", state)
                self.assertTrue(torch.equal(state["model.embed_tokens.weight"],
                                            self.params["embed.weight"]))
                check_losses(self, reader)


class Qwen3MoeExportTest(unittest.TestCase):
    """A model with QK-norm exports as Qwen3MoeForCausalLM."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        stdout = exported_case(
            cls, plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150, kv_heads=2,
                                    rope_theta=1e6, qk_norm=True), 12)
        assert "(Hugging Face Qwen3MoeForCausalLM)" in stdout, stdout

    def test_the_exported_model_has_plateaus_loss(self):
        check_losses(self, hf_qwen3_moe)

    def test_the_layout_is_transformers_and_the_values_plateaus(self):
        with open(os.path.join(self.output, "config.json")) as file:
            config = json.load(file)
        self.assertEqual(config["architectures"], ["Qwen3MoeForCausalLM"])
        self.assertEqual(config["model_type"], "qwen3_moe")
        self.assertEqual(
            (config["hidden_size"], config["num_attention_heads"],
             config["num_key_value_heads"], config["head_dim"],
             config["num_experts"], config["num_experts_per_tok"],
             config["moe_intermediate_size"], config["norm_topk_prob"],
             config["decoder_sparse_step"], config["mlp_only_layers"],
             config["rope_theta"], config["tie_word_embeddings"],
             config["rms_norm_eps"], config["router_aux_loss_coef"]),
            (32, 4, 2, 8, 4, 2, 24, True, 1, [], 1e6, False, 1e-5, 0.01))
        self.assertNotIn("num_local_experts", config)
        _, state = hf_qwen3_moe.load(self.output, dtype=torch.float32)
        # The embedding, the final norm and the head, and 2 layers x (2
        # norms, 4 projections, q_norm and k_norm, the gate, 4 experts x 3
        # matrices).
        self.assertEqual(len(state), 3 + 2 * (2 + 4 + 2 + 1 + 12))
        p = self.params
        for hf_name, value in (
                ("model.layers.1.self_attn.q_norm.weight",
                 p["layers.1.attn.q_norm.weight"]),
                ("model.layers.0.self_attn.k_norm.weight",
                 p["layers.0.attn.k_norm.weight"]),
                ("model.layers.1.mlp.gate.weight",
                 p["layers.1.moe.router.weight"]),
                ("model.layers.0.mlp.experts.3.gate_proj.weight",
                 p["layers.0.moe.experts.w1"][3]),
                ("model.layers.1.mlp.experts.2.up_proj.weight",
                 p["layers.1.moe.experts.w3"][2]),
                ("model.layers.1.mlp.experts.0.down_proj.weight",
                 p["layers.1.moe.experts.w2"][0])):
            self.assertTrue(torch.equal(state[hf_name], value), hf_name)


# Qwen3MoeConfig's keys as save_pretrained writes them, with a dense
# intermediate_size that no layer uses (every layer is sparse).
QWEN3_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "vocab_size": 50, "hidden_size": 32, "intermediate_size": 96,
    "moe_intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "hidden_act": "silu",
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False,
    "attention_dropout": 0.0, "use_sliding_window": False,
    "sliding_window": None, "max_window_layers": 2,
    "tie_word_embeddings": False, "router_aux_loss_coef": 0.001,
    "output_router_logits": False, "bos_token_id": 1, "eos_token_id": 2,
    "torch_dtype": "bfloat16", "use_cache": True,
    "transformers_version": "4.51.0",
}


def qwen3_state(config, generator):
    """Random bfloat16 weights at Qwen3-MoE's names and shapes."""
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    heads, kv_heads = (config["num_attention_heads"],
                       config["num_key_value_heads"])
    ffn, vocab = config["moe_intermediate_size"], config["vocab_size"]
    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        shapes.update({
            layer + "input_layernorm.weight": (hidden,),
            layer + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            layer + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            layer + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            layer + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            layer + "self_attn.q_norm.weight": (head_dim,),
            layer + "self_attn.k_norm.weight": (head_dim,),
            layer + "post_attention_layernorm.weight": (hidden,),
            layer + "mlp.gate.weight": (config["num_experts"], hidden),
        })
        for e in range(config["num_experts"]):
            expert = f"{layer}mlp.experts.{e}."
            shapes.update({expert + "gate_proj.weight": (ffn, hidden),
                           expert + "up_proj.weight": (ffn, hidden),
                           expert + "down_proj.weight": (hidden, ffn)})
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab, hidden)
    state = {}
    for name, shape in shapes.items():
        value = 0.3 * torch.randn(shape, generator=generator)
        if len(shape) == 1:
            value += 1.0
        state[name] = value.to(torch.bfloat16)
    return state


class HuggingFaceImportTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.directory = os.path.join(cls.root, "qwen3")
        os.makedirs(cls.directory)
        with open(os.path.join(cls.directory, "config.json"), "w") as file:
            json.dump(QWEN3_CONFIG, file, indent=2)
        generator = torch.Generator().manual_seed(13)
        cls.state = qwen3_state(QWEN3_CONFIG, generator)
        plateau_moe.write_safetensors(
            os.path.join(cls.directory, "model.safetensors"), cls.state)
        # Two windows of seq_len + 1 tokens sharing a token, as eval cuts a
        # raw token file.
        seq_len = 150
        ids = torch.randint(0, 50, (2 * seq_len + 1,), generator=generator)
        cls.tokens = torch.stack([ids[:seq_len + 1], ids[seq_len:]])
        cls.tokens_path = os.path.join(cls.root, "tokens.bin")
        ids.numpy().astype("<u4").tofile(cls.tokens_path)
        text = spec_text(plateau_moe.Config(
            2, 32, 4, 4, 2, 24, 50, seq_len, kv_heads=2, rope_theta=1e6,
            qk_norm=True))
        cls.spec = os.path.join(cls.root, "spec.yaml")
        with open(cls.spec, "w") as file:
            file.write(text + "precision: fp32\n")
        cls.bf16_spec = os.path.join(cls.root, "bf16.yaml")
        with open(cls.bf16_spec, "w") as file:
            file.write(text + "precision: bf16\n")

    def evaluate(self, spec):
        summary = os.path.join(self.root, "eval.json")
        result = subprocess.run(
            [WORKER, "eval", spec, f"--weights={self.directory}",
             f"--tokens={self.tokens_path}", f"--summary_json={summary}"],
            capture_output=True, text=True)
        return result, summary

    def test_the_engine_computes_the_directorys_loss(self):
        config, state = hf_qwen3_moe.load(self.directory)
        self.assertEqual(state["lm_head.weight"].dtype, torch.float64)
        reference = hf_qwen3_moe.causal_lm_loss(
            config, state, self.tokens.to(torch.int64)).item()
        # float32 compute within the parity test's bound; bf16 compute
        # (the default precision) within issue 21's bf16 parity bound.
        for spec, precision, bound in ((self.spec, "float32", 2e-5),
                                       (self.bf16_spec, "bf16", 1e-2)):
            result, summary_path = self.evaluate(spec)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(summary_path) as file:
                evaluation = json.load(file)["evaluation"]
            self.assertEqual(evaluation["windows"], 2)
            relative = abs(evaluation["cross_entropy"] - reference) / reference
            print(f"the engine's {precision} cross-entropy of the BF16 "
                  f"directory {evaluation['cross_entropy']:.7f}, the "
                  f"reader's float64 {reference:.7f} ({relative:.1e} "
                  f"relative)")
            self.assertLess(relative, bound)

    def test_a_directory_of_another_model_is_refused(self):
        other = os.path.join(self.root, "other.yaml")
        with open(self.spec) as file, open(other, "w") as out:
            out.write(file.read().replace("d_model: 32", "d_model: 64")
                      .replace("qk_norm: true", "qk_norm: false"))
        result, _ = self.evaluate(other)
        self.assertEqual(result.returncode, 1)
        self.assertIn("architectures is [\"Qwen3MoeForCausalLM\"], but the "
                      "spec's model is MixtralForCausalLM: set model.qk_norm: "
                      "true", result.stderr)
        with open(self.spec) as file, open(other, "w") as out:
            out.write(file.read().replace("d_model: 32", "d_model: 64"))
        result, _ = self.evaluate(other)
        self.assertEqual(result.returncode, 1)
        self.assertIn("hidden_size is 32, but model.d_model is 64",
                      result.stderr)


if __name__ == "__main__":
    MODEL_GRADIENTS = os.path.abspath(sys.argv.pop(2))
    WORKER = os.path.abspath(sys.argv.pop(1))
    junit.main()
