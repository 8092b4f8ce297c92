"""plateau-worker export: Plateau's weights in the Hugging Face layout.

Exports random weights of a grouped-query model through plateau-worker, in
several shards, reads the directory back as transformers would with an
independent MixtralForCausalLM (hf_mixtral.py), and compares its loss on a
batch, in float64, with Plateau's model (plateau_moe.py, float64) within
1e-6 relative, and with the engine itself (model_gradients, float32) within
the parity test's 2e-5. Also: the tensors are Plateau's bit for bit, the
index covers the shards, and bad input is refused with nothing written.

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
import junit  # noqa: E402
import plateau_moe  # noqa: E402

WORKER = None
MODEL_GRADIENTS = None

SPEC = """\
name: export
model: {{layers: {c.layers}, d_model: {c.d_model}, heads: {c.heads},
        kv_heads: {c.kv_heads}, experts: {c.experts}, top_k: {c.top_k},
        ffn_hidden: {c.ffn_hidden}, vocab: {c.vocab}, seq_len: {c.seq_len},
        rope_theta: {c.rope_theta}}}
data: {{path: unused, batch_tokens: {c.seq_len}}}
train: {{steps: 1}}
"""


def export(*arguments):
    return subprocess.run([WORKER, "export", *arguments], capture_output=True,
                          text=True)


class HuggingFaceExportTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        # Two query heads a key-value head, Qwen3's rotary base, and a
        # sequence longer than the attention kernel's 128-token blocks.
        cls.config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                        kv_heads=2, rope_theta=5e5)
        generator = torch.Generator().manual_seed(11)
        cls.params = plateau_moe.random_parameters(cls.config, generator,
                                                   scale=0.3)
        cls.tokens = torch.randint(0, cls.config.vocab,
                                   (2, cls.config.seq_len + 1),
                                   generator=generator)
        cls.weights = os.path.join(cls.root, "weights.safetensors")
        plateau_moe.write_safetensors(cls.weights, cls.params)
        cls.spec = os.path.join(cls.root, "spec.yaml")
        with open(cls.spec, "w") as file:
            file.write(SPEC.format(c=cls.config))
        cls.output = os.path.join(cls.root, "hf")
        result = export(cls.spec, f"--weights={cls.weights}",
                        f"--output={cls.output}", "--max_shard_bytes=40000")
        assert result.returncode == 0, result.stderr

    def test_the_exported_model_has_plateaus_loss(self):
        config, state = hf_mixtral.load(self.output)
        exported = hf_mixtral.causal_lm_loss(config, state,
                                             self.tokens.to(torch.int64))
        p64 = {name: value.to(torch.float64)
               for name, value in self.params.items()}
        plateau, _, _ = plateau_moe.loss(p64, self.tokens.to(torch.int64),
                                         self.config)
        relative = abs(exported.item() - plateau.item()) / plateau.item()
        print(f"exported {exported.item():.12f}, Plateau's model "
              f"{plateau.item():.12f} in float64 ({relative:.1e} relative)")
        self.assertLess(relative, 1e-6)

        tokens_path = os.path.join(self.root, "tokens.bin")
        self.tokens.numpy().astype("<u4").tofile(tokens_path)
        c = self.config
        engine = json.loads(subprocess.run(
            [MODEL_GRADIENTS, f"--layers={c.layers}", f"--d_model={c.d_model}",
             f"--heads={c.heads}", f"--kv_heads={c.kv_heads}",
             f"--experts={c.experts}", f"--top_k={c.top_k}",
             f"--ffn_hidden={c.ffn_hidden}", f"--vocab={c.vocab}",
             f"--seq_len={c.seq_len}", f"--rope_theta={c.rope_theta!r}",
             "--sequences=2", f"--weights={self.weights}",
             f"--tokens={tokens_path}",
             f"--gradients={os.path.join(self.root, 'gradients.safetensors')}"],
            check=True, capture_output=True, text=True).stdout)
        engine_relative = (abs(engine["cross_entropy"] - exported.item())
                           / exported.item())
        print(f"the engine's float32 cross-entropy "
              f"{engine['cross_entropy']:.7f} ({engine_relative:.1e})")
        self.assertLess(engine_relative, 2e-5)

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
            file.write(SPEC.format(c=self.config).replace("kv_heads: 2",
                                                          "kv_heads: 4"))
        refused = os.path.join(self.root, "refused")
        result = export(other, f"--weights={self.weights}",
                        f"--output={refused}")
        self.assertEqual(result.returncode, 1)
        self.assertIn("does not hold this model's weights: "
                      "layers.0.attn.wk.weight is F32 [16, 32], the model's "
                      "F32 [32, 32]", result.stderr)
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


if __name__ == "__main__":
    MODEL_GRADIENTS = os.path.abspath(sys.argv.pop(2))
    WORKER = os.path.abspath(sys.argv.pop(1))
    junit.main()
