"""What running through the service costs: the same job trained standalone
(`plateau-worker train --world 2`) and submitted to a local cluster (plateaud
and one worker agent with two CPU devices, `plateau submit`), alternating, in
the same run. Reports per round the wall time (standalone: the process;
service: `plateau submit --watch`, from submission until it reports
SUCCEEDED, scheduling and start-up included) and the training tokens/s that rank 0 logs, and the ratios of the
medians.

Usage, after deploy/quickstart.sh has prepared data/brown:
  bazel build //daemon:plateaud //worker:plateau-worker //client:plateau
  python3 tests/bench/service_overhead_bench.py [--rounds 3] [--steps 60]
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "bazel-bin")
PLATEAUD = os.path.join(BIN, "daemon", "plateaud")
WORKER = os.path.join(BIN, "worker", "plateau-worker")
CLI = os.path.join(BIN, "client", "plateau")


def spec_text(steps, data):
    """deploy/examples/tiny-moe.yaml with `steps` steps, no validation and
    no checkpoint before the last step."""
    with open(os.path.join(ROOT, "deploy", "examples", "tiny-moe.yaml")) as f:
        text = f.read()
    text = re.sub(r"steps: \d+, checkpoint_every: \d+, eval_every: \d+",
                  f"steps: {steps}, checkpoint_every: 0, eval_every: 0", text)
    return text.replace("path: data/brown", f"path: {data}")


def tokens_per_second(log_text):
    """Mean of the tokens/s rank 0 logs after the first step."""
    rates = [float(rate) for step, rate in re.findall(
        r"step +(\d+)/\d+ .* (\d+) tokens/s", log_text) if int(step) > 1]
    return statistics.mean(rates)


def standalone(spec, work):
    start = time.monotonic()
    result = subprocess.run(
        [WORKER, "train", spec, "--world=2", "--threads=1",
         f"--run_dir={os.path.join(work, 'standalone-' + str(time.time()))}"],
        capture_output=True, text=True, check=True)
    return time.monotonic() - start, tokens_per_second(result.stdout)


class LocalCluster:
    def __init__(self, work):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{probe.getsockname()[1]}"
        self.daemon = subprocess.Popen(
            [PLATEAUD, f"--listen={self.address}",
             "--metrics_listen=127.0.0.1:0",
             f"--data_dir={os.path.join(work, 'plateaud')}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.worker = subprocess.Popen(
            [WORKER, f"--coordinator={self.address}", "--name=bench",
             "--devices=cpu:2", "--device_memory=4GiB", "--threads=1",
             "--metrics_listen=127.0.0.1:0", f"--work_dir={work}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while "READY" not in self.cli("nodes", check=False).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not attach")
            time.sleep(0.2)

    def cli(self, *args, check=True):
        return subprocess.run([CLI, f"--coordinator={self.address}", *args],
                              capture_output=True, text=True, check=check)

    def run(self, spec):
        # One watching process rather than polling: a CLI started many times
        # a second would itself take CPU from the ranks.
        start = time.monotonic()
        watched = self.cli("submit", spec, "--watch", check=False)
        seconds = time.monotonic() - start
        job_id = re.search(r"j-[0-9a-z]+", watched.stdout).group(0)
        if watched.returncode != 0:
            raise RuntimeError(f"{job_id} did not succeed:\n{watched.stdout}")
        return seconds, tokens_per_second(self.cli("logs", job_id).stdout)

    def stop(self):
        for process in (self.worker, self.daemon):
            process.terminate()
            process.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--data", default=os.path.join(ROOT, "data", "brown"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="plateau-service-bench-")
    spec = os.path.join(work, "spec.yaml")
    with open(spec, "w") as file:
        file.write(spec_text(args.steps, args.data))
    cluster = LocalCluster(work)
    rows = []
    try:
        for round_index in range(args.rounds):
            alone = standalone(spec, work)
            served = cluster.run(spec)
            rows.append({"round": round_index + 1,
                         "standalone_seconds": alone[0],
                         "standalone_tokens_per_second": alone[1],
                         "service_seconds": served[0],
                         "service_tokens_per_second": served[1]})
            print(f"round {round_index + 1}: standalone {alone[0]:.1f} s "
                  f"{alone[1]:.0f} tokens/s; service {served[0]:.1f} s "
                  f"{served[1]:.0f} tokens/s", flush=True)
    finally:
        cluster.stop()

    def median(key):
        return statistics.median(row[key] for row in rows)

    summary = {
        "rounds": rows,
        "wall_time_ratio": median("service_seconds") /
        median("standalone_seconds"),
        "tokens_per_second_ratio": median("service_tokens_per_second") /
        median("standalone_tokens_per_second"),
    }
    print(f"service / standalone, medians of {args.rounds} rounds of "
          f"{args.steps} steps: wall time {summary['wall_time_ratio']:.3f}x, "
          f"training tokens/s {summary['tokens_per_second_ratio']:.3f}x")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(summary, file, indent=2)


if __name__ == "__main__":
    sys.exit(main())
