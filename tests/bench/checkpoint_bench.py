"""Checkpoint writes in the background against blocking ones
(train.checkpoint_write), and sharded over 1, 2 and 4 ranks, on one
machine, by plateau-worker train:
- the example job (deploy/examples/tiny-moe.yaml as it is: ep=2, SkewAdam,
  all four schedules), on the synthetic corpus;
- a 113M-parameter MoE (4 layers, d_model 512, 16 experts of ffn 1024,
  vocab 8192, AdamW, fp32) as one rank, ep=2 and ep=2 x dp=2.

Each trains 11 steps with a checkpoint every 5, once per mode per round
(alternating). Step 10's checkpoint is waited for by step 11's, which ends
the run, in either mode, so the comparison is of step 5's. For each run it
reports:
- what every rank wrote (its shard files, from step 6's manifest);
- how long training stood still for it (rank 0's record: the copy to
  host memory, any wait for the writes, the commit);
- how long the slowest rank took to write it;
- the time of steps 6 to 8, which run while a background write is in
  flight (on a machine of few cores the writer competes with the ranks);
- rank 0's host peak and, of it, its snapshot.

Usage: checkpoint_bench.py PLATEAU_WORKER [--rounds N] [--json FILE]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
import synthetic_corpus  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "deploy", "examples", "tiny-moe.yaml")

LARGE_SPEC = {
    "name": "checkpoint-bench",
    "model": {"layers": 4, "d_model": 512, "heads": 8, "experts": 16,
              "top_k": 2, "ffn_hidden": 1024, "vocab": 8192, "seq_len": 128},
    "optimizer": {"kind": "adamw", "lr": 3.0e-3, "warmup_steps": 1,
                  "grad_clip": 1.0},
    "data": {"batch_tokens": 512},
    "precision": "fp32",
}

# name: (spec, ep, dp); None: the example's own.
CONFIGURATIONS = {
    "example (ep=2)": (None, None, None),
    "113M, 1 rank": (LARGE_SPEC, 1, 1),
    "113M, ep=2": (LARGE_SPEC, 2, 1),
    "113M, ep=2 x dp=2": (LARGE_SPEC, 2, 2),
}
MODES = ("background", "blocking")
STEPS = 11
CHECKPOINT_EVERY = 5
COMPARED_CHECKPOINTS = (5,)
STEPS_DURING_WRITES = (6, 7, 8)


def spec_for(configuration, mode, data):
    base, ep, dp = configuration
    if base is None:
        with open(EXAMPLE) as file:
            spec = yaml.safe_load(file)
    else:
        spec = json.loads(json.dumps(base))
        spec["parallel"] = {"ep": ep, "pp": 1, "dp": dp}
        spec["resources"] = {"nodes": 1, "devices_per_node": ep * dp}
    spec["data"]["path"] = data
    spec["train"] = {"steps": STEPS, "checkpoint_every": CHECKPOINT_EVERY,
                     "eval_every": 0, "seed": 1, "checkpoint_write": mode}
    return spec


def run(worker, root, name, configuration, mode, data):
    spec = spec_for(configuration, mode, data)
    world = (spec["parallel"]["ep"] * spec["parallel"]["pp"] *
             spec["parallel"]["dp"])
    tag = f"{name}-{mode}".replace(" ", "_").replace("=", "").replace(
        "(", "").replace(")", "")
    spec_path = os.path.join(root, tag + ".yaml")
    with open(spec_path, "w") as file:
        yaml.safe_dump(spec, file)
    run_dir = os.path.join(root, "run-" + tag)
    shutil.rmtree(run_dir, ignore_errors=True)
    summary_path = run_dir + ".json"
    subprocess.run([worker, "train", spec_path, f"--world={world}",
                    f"--run_dir={run_dir}", "--threads=1",
                    "--device_memory=8GiB", f"--summary_json={summary_path}"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(summary_path) as file:
        summary = json.load(file)
    step_dir = os.path.join(run_dir, "checkpoints", f"step-{STEPS:08d}")
    with open(os.path.join(step_dir, "MANIFEST.json")) as file:
        manifest = json.load(file)
    per_rank = [0] * world
    for listed in manifest["files"]:
        if listed["name"] == "state.json":
            continue
        per_rank[int(listed["name"].split("rank-")[1][:5])] += listed["bytes"]
    writes = {write["step"]: write for write in summary["checkpoint_writes"]}
    steps = {step["step"]: step for step in summary["steps"]}
    host = summary["memory"]["pools"]["host"]
    shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "configuration": name,
        "mode": mode,
        "ranks": world,
        "bytes_written_per_rank": per_rank,
        "stall_seconds": [writes[s]["stall_seconds"]
                          for s in COMPARED_CHECKPOINTS],
        "write_seconds": [writes[s]["write_seconds"]
                          for s in COMPARED_CHECKPOINTS],
        "step_seconds_during_writes": [steps[s]["seconds"]
                                       for s in STEPS_DURING_WRITES],
        "rank_0_host_peak_bytes": host["peak_bytes"],
        "rank_0_snapshot_peak_bytes":
            host["components"]["snapshot"]["peak_bytes"],
    }


def describe(result):
    mib = 1 << 20

    def ms(values):
        return ", ".join(f"{1000 * value:.0f}" for value in values)

    return (f"{result['configuration']}, {result['mode']}: per rank "
            + ", ".join(f"{b / mib:.1f}" for b in
                        result["bytes_written_per_rank"])
            + f" MiB; stall {ms(result['stall_seconds'])} ms; write "
            f"{ms(result['write_seconds'])} ms; steps 6-8 "
            f"{ms(result['step_seconds_during_writes'])} ms; rank 0 host "
            f"peak {result['rank_0_host_peak_bytes'] / mib:.1f} MiB, of it "
            f"snapshot {result['rank_0_snapshot_peak_bytes'] / mib:.1f} MiB")


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
            for name, configuration in CONFIGURATIONS.items():
                # Alternate which mode goes first, round by round.
                for mode in (MODES if round_ % 2 else reversed(MODES)):
                    result = run(args.worker, root, name, configuration, mode,
                                 data)
                    result["round"] = round_
                    results.append(result)
                    print(f"round {round_}: {describe(result)}", flush=True)
        if args.json:
            with open(args.json, "w") as file:
                json.dump(results, file, indent=2)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
