"""PyTorch eager baseline for train_throughput_bench: the same model
(tests/pytorch/plateau_moe.py, float32), the same shape, batch and threads,
trained with torch.optim.AdamW and gradient clipping on random tokens.

Usage: /usr/bin/python3 pytorch_train_bench.py [--steps N] [--threads N]
       [--json FILE]
Run by tests/bench/run.sh, which sets OPENBLAS_CORETYPE as Plateau does, so
both use the same BLAS kernels.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "pytorch"))
import plateau_moe  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = plateau_moe.Config(layers=4, d_model=256, heads=8, experts=8,
                                top_k=2, ffn_hidden=512, vocab=4096,
                                seq_len=256)
    sequences = 8
    generator = torch.Generator().manual_seed(1)
    params = {name: torch.nn.Parameter(value) for name, value in
              plateau_moe.random_parameters(config, generator,
                                            scale=0.02).items()}
    optimizer = torch.optim.AdamW(params.values(), lr=1e-3)

    def step():
        tokens = torch.randint(0, config.vocab,
                               (sequences, config.seq_len + 1),
                               generator=generator)
        optimizer.zero_grad(set_to_none=True)
        ce, aux = plateau_moe.loss(params, tokens, config)
        (ce + aux).backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        optimizer.step()

    step()
    step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = time.perf_counter() - start
    tokens_per_second = args.steps * sequences * config.seq_len / elapsed
    print(f"PyTorch {torch.__version__} eager, {args.threads} threads: "
          f"{tokens_per_second:.0f} tokens/s")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"threads": args.threads,
                       "tokens_per_second": tokens_per_second}, file, indent=2)


if __name__ == "__main__":
    main()
