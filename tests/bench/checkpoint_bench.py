"""Sharded checkpoint writes at 1, 2 and 4 ranks on one machine: a 113M
parameter MoE (4 layers, d_model 512, 16 experts of ffn 1024, vocab 8192)
trained for 2 steps by plateau-worker, with a checkpoint after each, as one
rank, ep=2, and ep=2 x dp=2. For each it reports what every rank wrote (its
shard files), rank 0's host peak of the `snapshot` component (its shards
on their way to disk) against the whole checkpoint, and how long training
stood still for each checkpoint (rank 0's record: the copy, the writes and
the commit). Each configuration runs once per round, alternating.

Usage: checkpoint_bench.py PLATEAU_WORKER [--rounds N] [--json FILE]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
import synthetic_corpus  # noqa: E402

SPEC = """\
name: checkpoint-bench
resources: {{nodes: 1, devices_per_node: {world}}}
model: {{layers: 4, d_model: 512, heads: 8, experts: 16, top_k: 2,
        ffn_hidden: 1024, vocab: 8192, seq_len: 128}}
parallel: {{ep: {ep}, pp: 1, dp: {dp}}}
optimizer: {{kind: adamw, lr: 3.0e-3, warmup_steps: 1, grad_clip: 1.0}}
data: {{path: {data}, batch_tokens: 512}}
train: {{steps: 2, checkpoint_every: 1, seed: 1}}
precision: fp32
"""

# name: (ep, dp)
CONFIGURATIONS = {"1 rank": (1, 1), "ep=2": (2, 1), "ep=2 x dp=2": (2, 2)}


def run(worker, root, name, ep, dp, data):
    world = ep * dp
    spec = os.path.join(root, f"{ep}-{dp}.yaml")
    with open(spec, "w") as file:
        file.write(SPEC.format(world=world, ep=ep, dp=dp, data=data))
    run_dir = os.path.join(root, f"run-{ep}-{dp}")
    shutil.rmtree(run_dir, ignore_errors=True)
    summary_path = run_dir + ".json"
    subprocess.run([worker, "train", spec, f"--world={world}",
                    f"--run_dir={run_dir}", "--threads=1",
                    "--device_memory=8GiB", f"--summary_json={summary_path}"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(summary_path) as file:
        summary = json.load(file)
    step_dir = os.path.join(run_dir, "checkpoints", "step-00000002")
    with open(os.path.join(step_dir, "MANIFEST.json")) as file:
        manifest = json.load(file)
    per_rank = [0] * world
    for listed in manifest["files"]:
        if listed["name"] == "state.json":
            continue
        per_rank[int(listed["name"].split("rank-")[1][:5])] += listed["bytes"]
    host = summary["memory"]["pools"]["host"]["components"]
    return {
        "configuration": name,
        "ranks": world,
        "checkpoint_bytes": sum(per_rank),
        "bytes_written_per_rank": per_rank,
        "rank_0_snapshot_peak_bytes": host["snapshot"]["peak_bytes"],
        "stall_seconds": [write["stall_seconds"]
                          for write in summary["checkpoint_writes"]],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("worker")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    root = tempfile.mkdtemp()
    try:
        data = synthetic_corpus.prepare_data(os.path.abspath(args.worker), root)
        results = []
        for round_ in range(1, args.rounds + 1):
            for name, (ep, dp) in CONFIGURATIONS.items():
                result = run(args.worker, root, name, ep, dp, data)
                result["round"] = round_
                results.append(result)
                mib = 1 << 20
                print(f"round {round_}: {name}: checkpoint "
                      f"{result['checkpoint_bytes'] / mib:.1f} MiB; per rank "
                      + ", ".join(f"{b / mib:.1f}" for b in
                                  result["bytes_written_per_rank"])
                      + f" MiB; rank 0 snapshot peak "
                      f"{result['rank_0_snapshot_peak_bytes'] / mib:.1f} MiB;"
                      f" stall per checkpoint "
                      + ", ".join(f"{1000 * s:.0f}" for s in
                                  result["stall_seconds"]) + " ms",
                      flush=True)
        if args.json:
            with open(args.json, "w") as file:
                json.dump(results, file, indent=2)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
