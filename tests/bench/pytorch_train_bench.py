"""PyTorch eager baseline for train_throughput_bench: the same model
(tests/pytorch/plateau_moe.py, float32 parameters, its experts batched
by batched_moe below), the same shape, batch and threads, trained with torch.optim.AdamW (foreach) and gradient clipping
on random tokens; with --autocast, the forward under
torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's own mixed precision
(bf16 products through oneDNN, float32 master weights).

Usage: /usr/bin/python3 pytorch_train_bench.py [--steps N] [--threads N]
       [--autocast] [--json FILE]
Run by tests/bench/run.sh, which sets OPENBLAS_CORETYPE as Plateau does, so
both use the same BLAS kernels.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "pytorch"))
import plateau_moe  # noqa: E402


def batched_moe(x, p, prefix, c, rounding=plateau_moe.keep):
    """plateau_moe.moe with the experts batched, as a tuned PyTorch MoE
    runs them: the token copies sorted by expert into an (experts, capacity,
    d) tensor (capacity: the busiest expert's copies), three torch.bmm over
    the stacked expert weights, and one index_add_ back."""
    n, d = x.shape
    probs = torch.softmax(x @ p[prefix + "moe.router.weight"].T, dim=-1)
    top_probs, top_experts = torch.topk(probs, c.top_k, dim=-1, sorted=True)
    gates = top_probs / top_probs.sum(-1, keepdim=True)
    expert_of = top_experts.reshape(-1)
    order = torch.argsort(expert_of, stable=True)
    sorted_experts = expert_of[order]
    counts = torch.bincount(expert_of, minlength=c.experts)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(n * c.top_k) - starts[sorted_experts]
    token = order // c.top_k
    padded = x.new_zeros(c.experts, int(counts.max()), d)
    padded[sorted_experts, slot] = rounding(x[token])
    w1, w3, w2 = (rounding(p[prefix + "moe.experts." + w])
                  for w in ("w1", "w3", "w2"))
    hidden = rounding(
        F.silu(rounding(torch.bmm(padded, w1.transpose(1, 2)))) *
        rounding(torch.bmm(padded, w3.transpose(1, 2))))
    rows = rounding(torch.bmm(hidden, w2.transpose(1, 2)))[sorted_experts,
                                                           slot]
    weighted = gates.reshape(-1)[order, None] * rows
    out = torch.zeros_like(x).index_add_(0, token, weighted.to(x.dtype))
    fraction = counts.to(x.dtype) / (n * c.top_k)
    aux = (c.load_balancing_coefficient * c.experts
           * (fraction * probs.mean(0)).sum())
    return out, aux


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--autocast", action="store_true")
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
    optimizer = torch.optim.AdamW(params.values(), lr=1e-3, foreach=True)

    def step():
        tokens = torch.randint(0, config.vocab,
                               (sequences, config.seq_len + 1),
                               generator=generator)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16,
                            enabled=args.autocast):
            ce, aux, _ = plateau_moe.loss(params, tokens, config,
                                          batched_moe)
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
    print(f"PyTorch {torch.__version__} eager"
          f"{' bf16 autocast' if args.autocast else ''}, {args.threads} "
          f"threads: {tokens_per_second:.0f} tokens/s")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"threads": args.threads, "autocast": args.autocast,
                       "tokens_per_second": tokens_per_second}, file, indent=2)


if __name__ == "__main__":
    main()
