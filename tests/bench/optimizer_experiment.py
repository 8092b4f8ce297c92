"""The optimizer comparison of docs/BENCHMARKS.md: the example MoE of
deploy/examples/tiny-moe.yaml (no memory schedules, so optimizer state sits
in device memory) trained on the Brown corpus with AdamW, SkewAdam (each
expert_momentum), Adafactor and Lion: the same data order, seed and steps.

First a learning-rate sweep (--sweep_steps steps per rate, the rates below)
picks each optimizer's rate by validation loss (SkewAdam's with fp32 expert
momentum serves all three SkewAdam settings); then every optimizer trains
--steps steps at its rate. Prints a markdown table: validation perplexity,
optimizer state, the device peak and its largest components, tokens/s.

Usage: optimizer_experiment.py PLATEAU_WORKER [--steps N] [--sweep_steps N]
                               [--data DIR] [--json FILE]
"""

import argparse
import json
import os
import subprocess
import tempfile

SPEC = """\
name: optimizers
resources: {{nodes: 1, devices_per_node: 1}}
model: {{layers: 4, d_model: 256, heads: 8, experts: 8, top_k: 2,
        ffn_hidden: 512, vocab: 4096, seq_len: 256}}
parallel: {{ep: 1, pp: 1, dp: 1}}
optimizer: {{kind: {kind}, lr: {lr}, weight_decay: 0.1, betas: [{beta1}, {beta2}],
            warmup_steps: 20, grad_clip: 1.0{extra}}}
data: {{path: {data}, batch_tokens: 2048}}
train: {{steps: {steps}, eval_every: {steps}, seed: 1}}
"""

# Lion with betas (0.9, 0.99), as its authors recommend. Each best rate
# should be inside its list (the script says when one is at an edge).
SWEEP = {
    "adamw": [1e-3, 3e-3, 6e-3],
    "skewadam": [1e-3, 3e-3, 6e-3],
    "adafactor": [3e-4, 1e-3, 3e-3],
    "lion": [3e-4, 1e-3, 3e-3],
}
FINALS = [
    ("adamw", "adamw", ""),
    ("skewadam, expert momentum none", "skewadam", "none"),
    ("skewadam, expert momentum bf16", "skewadam", "bf16"),
    ("skewadam, expert momentum fp32", "skewadam", "fp32"),
    ("adafactor", "adafactor", ""),
    ("lion", "lion", ""),
]


def train(worker, root, kind, lr, steps, data, expert_momentum):
    tag = f"{kind}-{expert_momentum or 'x'}-{lr:g}-{steps}"
    spec = os.path.join(root, f"{tag}.yaml")
    betas = (0.9, 0.99) if kind == "lion" else (0.9, 0.95)
    extra = (f", expert_momentum: {expert_momentum}"
             if expert_momentum else "")
    with open(spec, "w") as file:
        file.write(SPEC.format(kind=kind, lr=lr, beta1=betas[0],
                               beta2=betas[1], extra=extra, data=data,
                               steps=steps))
    run_dir = os.path.join(root, f"run-{tag}")
    summary = os.path.join(root, f"{tag}.json")
    subprocess.run([worker, "train", spec, f"--run_dir={run_dir}",
                    f"--summary_json={summary}", f"--log_every={steps}"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["rm", "-rf", run_dir], check=True)
    with open(summary) as file:
        return json.load(file)


def describe(result):
    device = result["memory"]["pools"]["device"]
    components = sorted(device["components"].items(),
                        key=lambda item: -item[1]["peak_bytes"])
    largest = ", ".join(f"{name} {value['peak_bytes'] / 2**20:.0f}"
                        for name, value in components[:3])
    return {
        "perplexity": result["validation"][-1]["perplexity"],
        "loss": result["validation"][-1]["cross_entropy"],
        "state_bytes": sum(result["optimizer_state_bytes"].values()),
        "device_peak_bytes": device["peak_bytes"],
        "largest": largest,
        "tokens_per_second": result["tokens_per_second"],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("worker")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sweep_steps", type=int, default=60)
    parser.add_argument("--data", default="data/brown")
    parser.add_argument("--json")
    arguments = parser.parse_args()
    data = os.path.abspath(arguments.data)
    root = tempfile.mkdtemp()
    rates = {}
    for kind, candidates in SWEEP.items():
        losses = {}
        for lr in candidates:
            result = train(arguments.worker, root, kind, lr,
                           arguments.sweep_steps, data,
                           "fp32" if kind == "skewadam" else "")
            losses[lr] = result["validation"][-1]["cross_entropy"]
        rates[kind] = min(losses, key=losses.get)
        edge = rates[kind] in (candidates[0], candidates[-1])
        print(f"sweep {kind} ({arguments.sweep_steps} steps): " +
              ", ".join(f"lr {lr:g} loss {loss:.3f}"
                        for lr, loss in losses.items()) +
              f" -> {rates[kind]:g}" +
              (" (at the edge of the sweep: widen it)" if edge else ""),
              flush=True)
    finals = {}
    for name, kind, expert_momentum in FINALS:
        finals[name] = describe(train(arguments.worker, root, kind,
                                      rates[kind], arguments.steps, data,
                                      expert_momentum))
        finals[name]["lr"] = rates[kind]
    subprocess.run(["rm", "-rf", root], check=True)
    adamw = finals["adamw"]
    print(f"\n{arguments.steps} steps of 2,048 tokens\n")
    print("| optimizer | lr | validation perplexity | state | of AdamW's | "
          "device peak (largest components, MiB) | tokens/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, row in finals.items():
        print(f"| {name} | {row['lr']:g} | {row['perplexity']:.1f} | "
              f"{row['state_bytes'] / 2**20:.2f} MiB | "
              f"{100 * row['state_bytes'] / adamw['state_bytes']:.1f}% | "
              f"{row['device_peak_bytes'] / 2**20:.0f} MiB ({row['largest']}) "
              f"| {row['tokens_per_second']:.0f} "
              f"({row['tokens_per_second'] / adamw['tokens_per_second']:.2f}x) |")
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump({"rates": rates, "finals": finals}, file, indent=2)


if __name__ == "__main__":
    main()
