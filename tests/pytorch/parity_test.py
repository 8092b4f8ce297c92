"""Plateau's model against PyTorch (float64 autograd) on the same weights.

Runs Plateau's forward and backward (model_gradients, float32) and compares
the cross-entropy, the load-balancing loss and every parameter's gradient
with PyTorch's, on a model large enough to cross the attention kernel's
128-token blocks and to route unevenly. Then Plateau in bf16 (precision:
bf16) twice: against PyTorch in float64 rounding where Plateau documents
that it rounds (plateau_moe.bf16_rounding), the losses within 2e-4
relative; and against PyTorch under bf16 autocast on the same weights, the
losses within 1e-2 relative, the gradients pointing the same way. Run by Bazel
(see BUILD) with the system Python that has python3-torch.

Usage: parity_test.py MODEL_GRADIENTS_BINARY
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
import plateau_moe  # noqa: E402

TOOL = None


def run_plateau(config, sequences, checkpointing, params, tokens,
                bf16=False):
    """Plateau's losses and gradients for these weights and tokens."""
    with tempfile.TemporaryDirectory() as directory:
        weights_path = os.path.join(directory, "weights.safetensors")
        tokens_path = os.path.join(directory, "tokens.bin")
        gradients_path = os.path.join(directory, "gradients.safetensors")
        plateau_moe.write_safetensors(weights_path, params)
        tokens.numpy().astype("<u4").tofile(tokens_path)
        output = subprocess.run(
            [TOOL, f"--layers={config.layers}", f"--d_model={config.d_model}",
             f"--heads={config.heads}", f"--kv_heads={config.kv_heads}",
             f"--experts={config.experts}",
             f"--top_k={config.top_k}", f"--ffn_hidden={config.ffn_hidden}",
             f"--vocab={config.vocab}", f"--seq_len={config.seq_len}",
             f"--rope_theta={config.rope_theta!r}",
             f"--rms_epsilon={config.rms_epsilon!r}",
             f"--aux_loss_coefficient={config.load_balancing_coefficient!r}",
             f"--z_loss_coefficient={config.z_loss_coefficient!r}",
             f"--qk_norm={str(config.qk_norm).lower()}",
             f"--expert_bias={str(config.expert_bias).lower()}",
             f"--sigmoid_router={str(config.router == 'sigmoid').lower()}",
             f"--shared_experts={config.shared_experts}",
             f"--shared_ffn_hidden={config.shared_ffn_hidden}",
             f"--tie_embeddings={str(config.tie_embeddings).lower()}",
             f"--sequences={sequences}",
             f"--activation_checkpointing={str(checkpointing).lower()}",
             f"--weights={weights_path}", f"--tokens={tokens_path}",
             f"--gradients={gradients_path}", f"--bf16={str(bf16).lower()}"],
            check=True, capture_output=True, text=True).stdout
        return (json.loads(output),
                plateau_moe.read_safetensors(gradients_path))


def inputs(config, sequences, seed):
    generator = torch.Generator().manual_seed(seed)
    params = plateau_moe.random_parameters(config, generator, scale=0.3)
    tokens = torch.randint(0, config.vocab, (sequences, config.seq_len + 1),
                           generator=generator)
    return params, tokens


def check(config, sequences, checkpointing, seed):
    """Returns a list of mismatches (empty when everything agrees)."""
    params, tokens = inputs(config, sequences, seed)
    plateau_losses, plateau_gradients = run_plateau(
        config, sequences, checkpointing, params, tokens)

    # The float32 weights, exactly, in float64.
    p64 = {name: value.to(torch.float64).requires_grad_()
           for name, value in params.items()}
    ce, aux, z = plateau_moe.loss(p64, tokens.to(torch.int64), config)
    (ce + aux + z).backward()

    failures = []
    worst = 0.0
    if abs(plateau_losses["cross_entropy"] - ce.item()) > 2e-5 * max(
            1.0, abs(ce.item())):
        failures.append(f"cross_entropy {plateau_losses['cross_entropy']} "
                        f"vs PyTorch {ce.item()}")
    if abs(plateau_losses["load_balancing"] - aux.item()) > 1e-6:
        failures.append(f"load_balancing {plateau_losses['load_balancing']} "
                        f"vs PyTorch {aux.item()}")
    if abs(plateau_losses["z_loss"] - z.item()) > 2e-6 * max(1.0, z.item()):
        failures.append(f"z_loss {plateau_losses['z_loss']} "
                        f"vs PyTorch {z.item()}")
    for name, value in p64.items():
        # An expert bias only chooses experts: no gradient reaches it.
        expected = (value.grad.numpy() if value.grad is not None
                    else numpy.zeros(tuple(value.shape)))
        actual = plateau_gradients[name].numpy().astype(numpy.float64)
        scale = max(numpy.abs(expected).max(), 1e-8)
        error = numpy.abs(actual - expected).max() / scale
        worst = max(worst, error)
        if error > 2e-4:
            failures.append(f"{name}: max error {error:.2e} of the largest "
                            f"gradient {scale:.2e}")
    print(f"cross_entropy {ce.item():.6f}, {len(p64)} gradients, largest "
          f"relative error {worst:.1e}")
    return failures


def check_bf16_rounding(config, sequences, checkpointing, seed):
    """Plateau in bf16 against the float64 model that rounds where section
    8 says Plateau does: mismatches. The losses must agree within 2e-4
    relative, where the unrounded float64 model is more than twice that
    away in one of them at least (else the case could not tell the two
    apart). What is left between Plateau and the rounded
    model is float32 accumulation, and the values near a rounding tie that
    the two round apart, a bf16 ulp (2^-8) each: measured up to 3.3e-5 of
    the losses here, and up to 2.4e-4 with a router of the others' scale,
    whose top-k choices such a change can flip. So the router here is
    confident, its weights ten times the others' scale. At this precision a
    single rounding point left out can hide in that noise; the points are
    held bitwise one by one in the engine's tests (attention_block_test,
    transformer_layer_test, experts_test, logits_test)."""
    params, tokens = inputs(config, sequences, seed)
    for layer in range(config.layers):
        params[f"layers.{layer}.moe.router.weight"] *= 10
    plateau_losses, _ = run_plateau(config, sequences, checkpointing, params,
                                    tokens, bf16=True)
    p64 = {name: value.to(torch.float64) for name, value in params.items()}
    int_tokens = tokens.to(torch.int64)
    rounded = plateau_moe.loss(p64, int_tokens, config,
                               rounding=plateau_moe.bf16_rounding)
    unrounded = plateau_moe.loss(p64, int_tokens, config)
    bound = 2e-4
    failures = []
    rounding_effect = 0.0
    for index, name in enumerate(("cross_entropy", "load_balancing")):
        expected = rounded[index].item()
        relative = abs(plateau_losses[name] - expected) / abs(expected)
        exact = unrounded[index].item()
        relative_to_exact = abs(plateau_losses[name] - exact) / abs(exact)
        print(f"bf16 {name}: {plateau_losses[name]:.7f} vs {expected:.7f} "
              f"rounded in float64 ({relative:.1e} relative), "
              f"{exact:.7f} unrounded ({relative_to_exact:.1e})")
        rounding_effect = max(rounding_effect, relative_to_exact)
        if relative > bound:
            failures.append(f"{name} {plateau_losses[name]} vs {expected} "
                            f"(float64, rounded where bf16 rounds)")
    if rounding_effect <= 2 * bound:
        failures.append(f"rounding moves the losses by {rounding_effect:.1e} "
                        f"at most: this case cannot tell it apart")
    return failures


def check_bf16(config, sequences, seed):
    """Plateau in bf16 against PyTorch's bf16 autocast: mismatches. The
    losses agree within 1e-2 relative; the gradients are compared with the
    float64 ones, and Plateau's must be at least as close as autocast's
    (which also rounds the router, attention's inner products and the
    products' outputs to bf16)."""
    params, tokens = inputs(config, sequences, seed)
    plateau_losses, plateau_gradients = run_plateau(
        config, sequences, True, params, tokens, bf16=True)
    p32 = {name: value.clone().requires_grad_()
           for name, value in params.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ce, aux, _ = plateau_moe.loss(p32, tokens.to(torch.int64), config)
    (ce.float() + aux.float()).backward()
    p64 = {name: value.to(torch.float64).requires_grad_()
           for name, value in params.items()}
    ce64, aux64, _ = plateau_moe.loss(p64, tokens.to(torch.int64), config)
    (ce64 + aux64).backward()
    failures = []
    relative = abs(plateau_losses["cross_entropy"] - ce.item()) / abs(ce.item())
    if relative > 1e-2:
        failures.append(f"cross_entropy {plateau_losses['cross_entropy']} "
                        f"vs PyTorch autocast {ce.item()}")

    def error(gradient, exact):
        return ((gradient.to(torch.float64) - exact).norm()
                / exact.norm()).item()

    plateau_total = autocast_total = 0.0
    for name, value in p64.items():
        exact = value.grad
        plateau_total += error(plateau_gradients[name], exact) ** 2
        autocast_total += error(p32[name].grad, exact) ** 2
    plateau_error = (plateau_total / len(p64)) ** 0.5
    autocast_error = (autocast_total / len(p64)) ** 0.5
    if plateau_error > autocast_error:
        failures.append(f"gradients {plateau_error:.2e} from float64 (rms of "
                        f"relative errors), autocast's {autocast_error:.2e}")
    print(f"bf16: cross_entropy {plateau_losses['cross_entropy']:.6f} vs "
          f"autocast {ce.item():.6f} ({relative:.1e} relative); gradients' "
          f"error from float64 {plateau_error:.2e}, autocast's "
          f"{autocast_error:.2e}")
    return failures


class PyTorchParityTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)

    def test_across_attention_blocks_with_checkpointing(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150)
        self.assertEqual(check(config, 2, True, 1), [])

    def test_across_attention_blocks_without_checkpointing(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150)
        self.assertEqual(check(config, 2, False, 2), [])

    def test_many_experts_top_three(self):
        config = plateau_moe.Config(1, 16, 2, 8, 3, 8, 37, 9)
        self.assertEqual(check(config, 3, True, 3), [])

    def test_model_options(self):
        # Qwen3's rotary base and RMSNorm epsilon, and a load-balancing loss
        # five times the default; long enough that the base changes the
        # angles much.
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                    load_balancing_coefficient=0.05,
                                    rope_theta=1e6, rms_epsilon=1e-6)
        self.assertEqual(check(config, 2, True, 6), [])

    def test_grouped_query_attention(self):
        # Two groups of two query heads, then one key and value head for
        # all four (multi-query attention).
        for kv_heads, seed in ((2, 7), (1, 8)):
            with self.subTest(kv_heads=kv_heads):
                config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                            kv_heads=kv_heads)
                self.assertEqual(check(config, 2, True, seed), [])

    def test_router_z_loss(self):
        # ST-MoE's coefficient is 1e-3; a larger one here, so that the
        # z-loss's gradient is not lost under the others'.
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                    z_loss_coefficient=0.05)
        self.assertEqual(check(config, 2, True, 10), [])

    def test_qk_norm(self):
        # Qwen3's attention: QK-norm with grouped-query heads, and without
        # them.
        for kv_heads, seed in ((2, 11), (4, 12)):
            with self.subTest(kv_heads=kv_heads):
                config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                            kv_heads=kv_heads, qk_norm=True)
                self.assertEqual(check(config, 2, True, seed), [])

    def test_expert_bias_chooses_the_experts(self):
        # Aux-loss-free balancing: biases of the probabilities' scale, which
        # change most tokens' choices, and no load-balancing loss.
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                    load_balancing_coefficient=0.0,
                                    expert_bias=True)
        self.assertEqual(check(config, 2, True, 14), [])

    def test_sigmoid_router(self):
        # DeepSeek-V3's routing (the sigmoid router with the expert bias),
        # and the sigmoid router with the load-balancing loss, whose
        # probabilities are the sigmoids normalised over the experts.
        for expert_bias, coefficient, seed in ((True, 0.0, 15),
                                               (False, 0.05, 16)):
            with self.subTest(expert_bias=expert_bias):
                config = plateau_moe.Config(
                    2, 32, 4, 4, 2, 24, 50, 150,
                    load_balancing_coefficient=coefficient,
                    expert_bias=expert_bias, router="sigmoid")
                self.assertEqual(check(config, 2, True, seed), [])

    def test_shared_experts(self):
        # One shared expert as wide as the routed ones (Qwen-like), and two
        # narrower ones beside DeepSeek-V3's routing.
        for shared, width, seed, options in (
                (1, 24, 17, {}),
                (2, 16, 18, {"load_balancing_coefficient": 0.0,
                             "expert_bias": True, "router": "sigmoid"})):
            with self.subTest(shared_experts=shared):
                config = plateau_moe.Config(
                    2, 32, 4, 4, 2, 24, 50, 150, shared_experts=shared,
                    shared_ffn_hidden=width, **options)
                self.assertEqual(check(config, 2, True, seed), [])

    def test_tied_embeddings(self):
        # The head projects onto the embedding's table: embed.weight's
        # gradient is the lookup's plus the head's. With and without
        # checkpointing, and beside the Qwen-like options.
        for checkpointing, seed, options in (
                (True, 21, {}), (False, 22, {}),
                (True, 23, {"kv_heads": 2, "qk_norm": True,
                            "shared_experts": 1})):
            with self.subTest(checkpointing=checkpointing, **options):
                config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                            tie_embeddings=True, **options)
                self.assertNotIn("lm_head.weight",
                                 dict(plateau_moe.parameter_shapes(config)))
                self.assertEqual(check(config, 2, checkpointing, seed), [])

    def test_tied_embeddings_bf16_rounds_where_documented(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                    tie_embeddings=True)
        self.assertEqual(check_bf16_rounding(config, 2, True, 24), [])

    def test_shared_experts_bf16_rounds_where_documented(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150,
                                    shared_experts=1)
        self.assertEqual(check_bf16_rounding(config, 2, False, 20), [])

    def test_qk_norm_bf16_rounds_where_documented(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150, kv_heads=2,
                                    qk_norm=True)
        self.assertEqual(check_bf16_rounding(config, 2, False, 13), [])

    def test_grouped_query_attention_bf16_rounds_where_documented(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150, kv_heads=2)
        self.assertEqual(check_bf16_rounding(config, 2, False, 9), [])

    def test_bf16_rounds_where_documented_with_checkpointing(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150)
        self.assertEqual(check_bf16_rounding(config, 2, True, 4), [])

    def test_bf16_rounds_where_documented_without_checkpointing(self):
        config = plateau_moe.Config(3, 32, 4, 8, 3, 24, 50, 70)
        self.assertEqual(check_bf16_rounding(config, 3, False, 5), [])

    def test_bf16_against_autocast(self):
        config = plateau_moe.Config(2, 32, 4, 4, 2, 24, 50, 150)
        self.assertEqual(check_bf16(config, 2, 4), [])


if __name__ == "__main__":
    TOOL = os.path.abspath(sys.argv.pop(1))
    junit.main()
