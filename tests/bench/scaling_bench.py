"""Training throughput from 1 to 2 ranks on one machine: the tiny-moe model
of deploy/examples (4 layers, d_model 256, 8 experts, top 2, seq_len 256,
2,048 tokens a step) trained by plateau-worker on one rank with all the
machine's cores, then on two ranks (one core each) as ep=2, dp=2 and pp=2.
Each configuration runs once per round, alternating, and its tokens/s is
reported as a ratio to the one-rank run of the same round.

Usage: scaling_bench.py PLATEAU_WORKER [--rounds N] [--steps N] [--json FILE]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
import synthetic_corpus  # noqa: E402

SPEC = """\
name: scaling
resources: {{nodes: 1, devices_per_node: {world}}}
model: {{layers: 4, d_model: 256, heads: 8, experts: 8, top_k: 2,
        ffn_hidden: 512, vocab: 4096, seq_len: 256}}
parallel: {{ep: {ep}, pp: {pp}, dp: {dp}}}
optimizer: {{kind: adamw, lr: 3.0e-3, warmup_steps: 2, grad_clip: 1.0}}
data: {{path: {data}, batch_tokens: 2048}}
train: {{steps: {steps}, seed: 1, micro_batches: {micro_batches}}}
"""

# name: (ep, pp, dp, micro-batches)
CONFIGURATIONS = {
    "1 rank": (1, 1, 1, 1),
    "ep=2": (2, 1, 1, 1),
    "dp=2": (1, 1, 2, 1),
    "pp=2": (1, 2, 1, 4),
}


def train(worker, root, name, data, steps):
    ep, pp, dp, micro_batches = CONFIGURATIONS[name]
    world = ep * pp * dp
    tag = name.replace(" ", "").replace("=", "")
    spec = os.path.join(root, f"{tag}.yaml")
    with open(spec, "w") as file:
        file.write(SPEC.format(world=world, ep=ep, pp=pp, dp=dp, data=data,
                               steps=steps, micro_batches=micro_batches))
    run_dir = os.path.join(root, f"run-{tag}")
    summary = os.path.join(root, f"{tag}.json")
    subprocess.run([worker, "train", spec, f"--world={world}",
                    f"--run_dir={run_dir}", f"--summary_json={summary}",
                    f"--log_every={steps}"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["rm", "-rf", run_dir], check=True)
    with open(summary) as file:
        return json.load(file)["tokens_per_second"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("worker")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--json")
    arguments = parser.parse_args()
    root = tempfile.mkdtemp()
    corpus = os.path.join(root, "corpus")
    synthetic_corpus.write_corpus(corpus, documents=2000, seed=1)
    data = os.path.join(root, "data")
    subprocess.run([arguments.worker, "data", "prepare", f"--input={corpus}",
                    f"--output={data}", "--vocab=512"], check=True,
                   stdout=subprocess.DEVNULL)
    results = []
    for round_ in range(1, arguments.rounds + 1):
        rates = {name: train(arguments.worker, root, name, data,
                             arguments.steps)
                 for name in CONFIGURATIONS}
        baseline = rates["1 rank"]
        print(f"round {round_}: 1 rank {baseline:.0f} tokens/s; " +
              ", ".join(f"{name} {rate:.0f} ({rate / baseline:.2f}x)"
                        for name, rate in rates.items() if name != "1 rank"),
              flush=True)
        results.append(rates)
    subprocess.run(["rm", "-rf", root], check=True)
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump({"rounds": results}, file, indent=2)


if __name__ == "__main__":
    main()
