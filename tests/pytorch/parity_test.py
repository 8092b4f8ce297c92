"""Plateau's model against PyTorch (float64 autograd) on the same weights.

Runs Plateau's forward and backward (model_gradients, float32) and compares
the cross-entropy, the load-balancing loss and every parameter's gradient
with PyTorch's, on a model large enough to cross the attention kernel's
128-token blocks and to route unevenly. Run by Bazel (see BUILD) with the
system Python that has python3-torch.

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


def check(config, sequences, checkpointing, seed):
    """Returns a list of mismatches (empty when everything agrees)."""
    generator = torch.Generator().manual_seed(seed)
    params = plateau_moe.random_parameters(config, generator, scale=0.3)
    tokens = torch.randint(0, config.vocab, (sequences, config.seq_len + 1),
                           generator=generator)
    with tempfile.TemporaryDirectory() as directory:
        weights_path = os.path.join(directory, "weights.safetensors")
        tokens_path = os.path.join(directory, "tokens.bin")
        gradients_path = os.path.join(directory, "gradients.safetensors")
        plateau_moe.write_safetensors(weights_path, params)
        tokens.numpy().astype("<u4").tofile(tokens_path)
        output = subprocess.run(
            [TOOL, f"--layers={config.layers}", f"--d_model={config.d_model}",
             f"--heads={config.heads}", f"--experts={config.experts}",
             f"--top_k={config.top_k}", f"--ffn_hidden={config.ffn_hidden}",
             f"--vocab={config.vocab}", f"--seq_len={config.seq_len}",
             f"--sequences={sequences}",
             f"--activation_checkpointing={str(checkpointing).lower()}",
             f"--weights={weights_path}", f"--tokens={tokens_path}",
             f"--gradients={gradients_path}"],
            check=True, capture_output=True, text=True).stdout
        plateau_losses = json.loads(output)
        plateau_gradients = plateau_moe.read_safetensors(gradients_path)

    # The float32 weights, exactly, in float64.
    p64 = {name: value.to(torch.float64).requires_grad_()
           for name, value in params.items()}
    ce, aux = plateau_moe.loss(p64, tokens.to(torch.int64), config)
    (ce + aux).backward()

    failures = []
    worst = 0.0
    if abs(plateau_losses["cross_entropy"] - ce.item()) > 2e-5 * max(
            1.0, abs(ce.item())):
        failures.append(f"cross_entropy {plateau_losses['cross_entropy']} "
                        f"vs PyTorch {ce.item()}")
    if abs(plateau_losses["load_balancing"] - aux.item()) > 1e-6:
        failures.append(f"load_balancing {plateau_losses['load_balancing']} "
                        f"vs PyTorch {aux.item()}")
    for name, value in p64.items():
        expected = value.grad.numpy()
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


if __name__ == "__main__":
    TOOL = os.path.abspath(sys.argv.pop(1))
    junit.main()
