"""bf16 against fp32 on the example job, over several seeds (issue 21's
quality target: the bf16 validation perplexity within 2% of fp32's).

Trains deploy/examples/tiny-moe.yaml as it is (300 steps of the Brown
corpus, ep 2, the four schedules, SkewAdam) in fp32 and in bf16, once per
seed, the seed the only other change; each pair shares its seed, so its
data order and initial weights. What fp32 and bf16 are is --compare's:
`precision` (the default: `precision: fp32` against `precision: bf16`) or
`gradients` (both `precision: bf16`, `gradient_accumulation: fp32` against
`bf16`). One run gives one sample of a trajectory that rounding perturbs,
so the comparison is over seeds: the per-seed ratio bf16 / fp32 of the
final validation perplexity, and their geometric mean with a 95% interval
(Student's t over the log ratios).

--one_step N asks the question a trajectory cannot: how far apart one
update of the two sides is from the same state. Each seed trains the fp32
side to step N, then step N + 1 from that checkpoint on each side; per
tensor it prints |d_bf16 - d_fp32| / |d_fp32| of the two updates d (the
weights' change over the step) and the projection <d_bf16, d_fp32> /
|d_fp32|^2, 1 where bf16's update is fp32's in direction and size on
average (a bias, such as lost or doubled gradient, moves it).

Usage: precision_quality.py PLATEAU_WORKER [--seeds 1,2,3] [--world 2]
                            [--compare precision|gradients] [--only bf16]
                            [--one_step N] [--data DIR] [--example SPEC]
                            [--json FILE]
--only runs one side of each pair (its table then has that side alone).
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import safetensors_file  # noqa: E402

EXAMPLE = "deploy/examples/tiny-moe.yaml"

# Two-sided 95% quantiles of Student's t by degrees of freedom; beyond 20
# the 20th, a slightly wider interval than the exact one.
T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447,
        7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179,
        13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101,
        19: 2.093, 20: 2.086}


# The two sides of each comparison: the top-level spec fields they set.
COMPARISONS = {
    "precision": {"fp32": {"precision": "fp32"},
                  "bf16": {"precision": "bf16"}},
    "gradients": {"fp32": {"precision": "bf16",
                           "gradient_accumulation": "fp32"},
                  "bf16": {"precision": "bf16",
                           "gradient_accumulation": "bf16"}},
}


def spec_for(example, data, seed, fields):
    """The example spec with its seed, data path and precision replaced, and
    any other top-level `fields` (a dict) added; the replaced ones must be
    there exactly once and the added ones absent, so that a changed example
    fails here rather than comparing something else."""
    replacements = [(r"seed: \d+", f"seed: {seed}"),
                    (r"path: [^,}]+", f"path: {data}")]
    added = []
    for field, value in fields.items():
        if field == "precision":
            replacements.append((r"^precision: \w+", f"precision: {value}"))
        elif re.search(rf"^{field}:", example, flags=re.M):
            raise ValueError(f"the example spec already sets {field}")
        else:
            added.append(f"{field}: {value}\n")
    for pattern, value in replacements:
        example, count = re.subn(pattern, value, example, flags=re.M)
        if count != 1:
            raise ValueError(f"expected one '{pattern}' in the example spec, "
                             f"found {count}")
    return example + "".join(added)


def with_steps(spec, steps, checkpoint_every):
    """The spec with train.steps, checkpoint_every and eval_every (0)
    replaced, each there exactly once."""
    for field, value in (("steps", steps),
                         ("checkpoint_every", checkpoint_every),
                         ("eval_every", 0)):
        spec, count = re.subn(rf"\b{field}: \d+", f"{field}: {value}", spec)
        if count != 1:
            raise ValueError(f"expected one '{field}:' in the spec, found "
                             f"{count}")
    return spec


def update_differences(before, fp32_after, bf16_after):
    """name -> (relative difference, projection) of the two updates from
    `before`, for every tensor that the fp32 step changed."""
    differences = {}
    for name, start in before.items():
        dot = fp32_squares = difference_squares = 0.0
        for b, f, g in zip(start, fp32_after[name], bf16_after[name]):
            d_fp32, d_bf16 = f - b, g - b
            dot += d_bf16 * d_fp32
            fp32_squares += d_fp32 * d_fp32
            difference_squares += (d_bf16 - d_fp32) ** 2
        if fp32_squares > 0:
            differences[name] = (math.sqrt(difference_squares / fp32_squares),
                                 dot / fp32_squares)
    return differences


def one_step(worker, root, example, data, seed, sides, world, step):
    """update_differences of step `step` + 1 of the two sides, from the fp32
    side's checkpoint after `step`."""
    def run(tag, text, run_dir, *flags):
        spec = os.path.join(root, f"{tag}.yaml")
        with open(spec, "w") as file:
            file.write(text)
        subprocess.run([worker, "train", spec, f"--world={world}",
                        "--device_memory=2GiB", f"--run_dir={run_dir}",
                        *flags], check=True, stdout=subprocess.DEVNULL)

    def weights(run_dir, number):
        return safetensors_file.read_checkpoint_tensors(
            os.path.join(run_dir, "checkpoints", f"step-{number:08d}"))

    base = os.path.join(root, f"base-seed{seed}")
    run(f"base-seed{seed}",
        with_steps(spec_for(example, data, seed, sides["fp32"]), step, step),
        base)
    after = {}
    for side, fields in sides.items():
        run_dir = os.path.join(root, f"{side}-seed{seed}")
        shutil.copytree(base, run_dir)
        run(f"{side}-seed{seed}",
            with_steps(spec_for(example, data, seed, fields), step + 1,
                       step + 1), run_dir, "--resume")
        after[side] = weights(run_dir, step + 1)
    return update_differences(weights(base, step), after["fp32"],
                              after["bf16"])


def compare(perplexities):
    """perplexities: (fp32, bf16) pairs, one per seed. The geometric mean of
    bf16 / fp32 and, from two seeds on, its two-sided 95% interval
    (Student's t over the log ratios); None without one."""
    logs = [math.log(bf16 / fp32) for fp32, bf16 in perplexities]
    mean = sum(logs) / len(logs)
    if len(logs) < 2:
        return math.exp(mean), None
    spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = T_95.get(len(logs) - 1, T_95[20]) * spread / math.sqrt(len(logs))
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


def train(worker, root, example, data, seed, side, fields, world):
    tag = f"{side}-seed{seed}"
    spec = os.path.join(root, f"{tag}.yaml")
    with open(spec, "w") as file:
        file.write(spec_for(example, data, seed, fields))
    run_dir = os.path.join(root, f"run-{tag}")
    summary = os.path.join(root, f"{tag}.json")
    start = time.monotonic()
    subprocess.run([worker, "train", spec, f"--world={world}",
                    "--device_memory=2GiB", f"--run_dir={run_dir}",
                    f"--summary_json={summary}", "--log_every=100"],
                   check=True, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    subprocess.run(["rm", "-rf", run_dir], check=True)
    with open(summary) as file:
        result = json.load(file)
    return {"perplexity": result["validation"][-1]["perplexity"],
            "validation": [(v["step"], v["perplexity"])
                           for v in result["validation"]],
            "seconds": seconds}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("worker")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--data", default="data/brown")
    parser.add_argument("--example", default=EXAMPLE)
    parser.add_argument("--compare", choices=sorted(COMPARISONS),
                        default="precision")
    parser.add_argument("--only", choices=("fp32", "bf16"))
    parser.add_argument("--one_step", type=int)
    parser.add_argument("--json")
    arguments = parser.parse_args()
    seeds = [int(seed) for seed in arguments.seeds.split(",")]
    sides = COMPARISONS[arguments.compare]
    with open(arguments.example) as file:
        example = file.read()
    try:
        for fields in sides.values():
            spec_for(example, "data", 1, fields)
    except ValueError as error:
        raise SystemExit(f"{arguments.example}: {error}")
    data = os.path.abspath(arguments.data)
    root = tempfile.mkdtemp()
    if arguments.one_step is not None:
        for seed in seeds:
            differences = one_step(arguments.worker, root, example, data,
                                   seed, sides, arguments.world,
                                   arguments.one_step)
            print(f"\nseed {seed}, step {arguments.one_step + 1} "
                  f"({arguments.compare}): the updates' difference")
            print("| tensor | difference / fp32 update | projection |")
            print("| --- | --- | --- |")
            for name, (relative, projection) in sorted(differences.items()):
                print(f"| {name} | {relative:.2e} | {projection:.6f} |")
            relatives = sorted(r for r, _ in differences.values())
            projections = [p for _, p in differences.values()]
            print(f"median difference {relatives[len(relatives) // 2]:.2e}, "
                  f"largest {relatives[-1]:.2e}; projections "
                  f"{min(projections):.6f} to {max(projections):.6f}",
                  flush=True)
        subprocess.run(["rm", "-rf", root], check=True)
        return
    runs = {}
    for seed in seeds:
        for side, fields in sides.items():
            if arguments.only not in (None, side):
                continue
            runs[(seed, side)] = train(arguments.worker, root, example, data,
                                       seed, side, fields, arguments.world)
            run = runs[(seed, side)]
            print(f"seed {seed} {side} ({arguments.compare}): perplexity "
                  f"{run['perplexity']:.1f} ({run['seconds']:.0f} s)",
                  flush=True)
    subprocess.run(["rm", "-rf", root], check=True)
    if arguments.only is not None:
        side = arguments.only
        steps = [step for step, _ in runs[(seeds[0], side)]["validation"]]
        print(f"\n| step | " + " | ".join(
            f"seed {s} {side}" for s in seeds) + " |")
        print("| --- |" + " --- |" * len(seeds))
        for index, step in enumerate(steps):
            print(f"| {step} | " + " | ".join(
                f"{runs[(s, side)]['validation'][index][1]:.1f}"
                for s in seeds) + " |")
        if arguments.json:
            with open(arguments.json, "w") as file:
                json.dump({"seeds": seeds, "runs": {
                    f"{p}-seed{s}": run for (s, p), run in runs.items()}},
                    file, indent=2)
        return

    steps = [step for step, _ in runs[(seeds[0], "fp32")]["validation"]]
    print("\n| step | " + " | ".join(
        f"seed {s} fp32 | bf16 | bf16 / fp32" for s in seeds) + " |")
    print("| --- |" + " --- | --- | --- |" * len(seeds))
    for index, step in enumerate(steps):
        cells = []
        for seed in seeds:
            fp32 = runs[(seed, "fp32")]["validation"][index][1]
            bf16 = runs[(seed, "bf16")]["validation"][index][1]
            cells.append(f"{fp32:.1f} | {bf16:.1f} | "
                         f"{100 * (bf16 / fp32 - 1):+.1f}%")
        print(f"| {step} | " + " | ".join(cells) + " |")

    ratio, interval = compare([(runs[(s, "fp32")]["perplexity"],
                                runs[(s, "bf16")]["perplexity"])
                               for s in seeds])
    summary = {"seeds": seeds, "ratio_geometric_mean": ratio,
               "interval_95": interval,
               "runs": {f"{p}-seed{s}": run for (s, p), run in runs.items()}}
    line = (f"\nbf16 / fp32 at step {steps[-1]}: geometric mean "
            f"{100 * (ratio - 1):+.2f}% over {len(seeds)} seeds")
    if interval is not None:
        line += (f", 95% interval {100 * (interval[0] - 1):+.2f}% to "
                 f"{100 * (interval[1] - 1):+.2f}%")
    print(line)
    fp32_seconds = sum(runs[(s, "fp32")]["seconds"] for s in seeds)
    bf16_seconds = sum(runs[(s, "bf16")]["seconds"] for s in seeds)
    print(f"end to end: fp32 {fp32_seconds:.0f} s, bf16 {bf16_seconds:.0f} s "
          f"({fp32_seconds / bf16_seconds:.2f}x)")
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump(summary, file, indent=2)


if __name__ == "__main__":
    main()
