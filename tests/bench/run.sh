#!/usr/bin/env bash
# Runs the benchmarks and prints the numbers docs/BENCHMARKS.md records.
# Each comparison is a ratio measured in the same run (these machines are
# shared and noisy), alternated over several rounds.
#   tests/bench/run.sh [ROUNDS]     (default 3)
# The optimizer comparison on the Brown corpus takes about half an hour and
# runs on its own: tests/bench/optimizer_experiment.py (see its usage); so
# does bf16 against fp32 over seeds, about ten minutes a seed:
# tests/bench/precision_quality.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
deploy/install-deps.sh >/dev/null
bazel build -c opt //tests/bench:all
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bench=bazel-bin/tests/bench

# PyTorch gets the OpenBLAS kernels Plateau picks (kernels/cpu/blas.h), so
# that the comparison is of the engines, not of OpenBLAS's CPU detection.
if grep -q avx512f /proc/cpuinfo; then core=SkylakeX; else core=Haswell; fi

echo "== training throughput: Plateau vs PyTorch $(/usr/bin/python3 -c \
  'import torch; print(torch.__version__)') eager, fp32 and bf16, 2 threads =="
for round in $(seq "$rounds"); do
  "$bench/train_throughput_bench" --steps 10 --json "$out/plateau.json" \
    >"$out/plateau.txt"
  "$bench/train_throughput_bench" --steps 10 --checkpointing=false \
    --json "$out/plateau_nockpt.json" >/dev/null
  "$bench/train_throughput_bench" --steps 10 --checkpointing=false \
    --precision bf16 --json "$out/plateau_bf16.json" >/dev/null
  OPENBLAS_CORETYPE=$core /usr/bin/python3 tests/bench/pytorch_train_bench.py \
    --steps 4 --json "$out/pytorch.json" >/dev/null
  OPENBLAS_CORETYPE=$core /usr/bin/python3 tests/bench/pytorch_train_bench.py \
    --steps 4 --autocast --json "$out/pytorch_bf16.json" >/dev/null
  /usr/bin/python3 - "$round" "$out" <<'PYTHON'
import json, sys
round_, out = sys.argv[1], sys.argv[2]
p = json.load(open(f"{out}/plateau.json"))
n = json.load(open(f"{out}/plateau_nockpt.json"))
b = json.load(open(f"{out}/plateau_bf16.json"))
t = json.load(open(f"{out}/pytorch.json"))
a = json.load(open(f"{out}/pytorch_bf16.json"))
print(f"round {round_}: fp32: Plateau {p['tokens_per_second']:.0f} tokens/s "
      f"(checkpointing; {n['tokens_per_second']:.0f} without), PyTorch "
      f"{t['tokens_per_second']:.0f} -> {p['tokens_per_second'] / t['tokens_per_second']:.2f}x "
      f"({n['tokens_per_second'] / t['tokens_per_second']:.2f}x); "
      f"MFU {100 * p['model_flop_utilisation']:.1f}% "
      f"({100 * n['model_flop_utilisation']:.1f}%) of sgemm "
      f"{p['reference_flops_per_second'] / 1e9:.0f} GFLOP/s")
print(f"round {round_}: bf16 (no checkpointing): Plateau "
      f"{b['tokens_per_second']:.0f} tokens/s, PyTorch autocast "
      f"{a['tokens_per_second']:.0f} -> "
      f"{b['tokens_per_second'] / a['tokens_per_second']:.2f}x; Plateau bf16 "
      f"/ fp32 {b['tokens_per_second'] / n['tokens_per_second']:.2f}x; MFU "
      f"{100 * b['model_flop_utilisation']:.1f}% of the bf16 products' "
      f"{b['reference_flops_per_second'] / 1e9:.0f} GFLOP/s")
PYTHON
done

echo "== experts scaling: 8, 32 and 128 experts at top 4, bf16, the same tokens a step =="
for experts in 8 32 128; do
  "$bench/train_throughput_bench" --steps 6 --checkpointing=false \
    --precision bf16 --top_k 4 --experts "$experts" |
    grep -E '^(threads|training|model FLOP utilisation)'
done

echo "== fused AdamW (100M parameters) vs STREAM triad, 2 threads =="
for round in $(seq "$rounds"); do
  "$bench/adamw_bandwidth_bench" --json "$out/adamw.json" >/dev/null
  /usr/bin/python3 - "$round" "$out" <<'PYTHON'
import json, sys
a = json.load(open(f"{sys.argv[2]}/adamw.json"))
print(f"round {sys.argv[1]}: AdamW {a['adamw_bytes_per_second'] / 1e9:.1f} GB/s, "
      f"triad {a['triad_bytes_per_second'] / 1e9:.1f} GB/s -> "
      f"{100 * a['adamw_fraction_of_triad']:.0f}%")
PYTHON
done
echo "== matrix products: OpenBLAS sgemm vs oneDNN float32 and bf16, 2 threads =="
"$bench/bf16_matmul_bench" --json "$out/bf16_matmul.json"
echo "== the same on one thread (attention's block products run so) =="
"$bench/bf16_matmul_bench" --threads 1
echo "== the example step's products through the CPU backend, cut into pieces, 2 threads and 1 =="
"$bench/cpu_products_bench" --json "$out/cpu_products.json"
"$bench/cpu_products_bench" --threads 1

echo "== plateaud: 1,000 simulated nodes, 10,000 queued jobs, real gRPC on loopback =="
# Every spec distinct (no plan from the cache), then the old queue of 64
# specs cycled, alternately: their ratio is the cost of planning each submit.
for round in $(seq "$rounds"); do
  for distinct in 0 64; do
    "$bench/daemon_bench" --distinct_specs="$distinct" \
      --json "$out/daemon.json" >/dev/null
    /usr/bin/python3 - "$round" "$out" "$distinct" <<'PYTHON'
import json, sys
d = json.load(open(f"{sys.argv[2]}/daemon.json"))
specs = "distinct specs" if sys.argv[3] == "0" else f"{sys.argv[3]} specs"
print(f"round {sys.argv[1]} ({specs}): {d['submits_per_second']:.0f} "
      f"submits/s from {d['clients']} clients; full-cluster pass p50 "
      f"{1e3 * d['pass_p50_seconds']:.2f} ms, p99 "
      f"{1e3 * d['pass_p99_seconds']:.2f} ms; placing pass p50 "
      f"{1e3 * d['placing_pass_p50_seconds']:.2f} ms, p99 "
      f"{1e3 * d['placing_pass_p99_seconds']:.2f} ms "
      f"({d['placed_jobs']} jobs placed)")
PYTHON
  done
done
echo "== distributed training: 1 rank (2 threads) vs 2 ranks (1 thread each) =="
bazel build -c opt //worker:plateau-worker //worker:plateau-data
/usr/bin/python3 tests/bench/scaling_bench.py bazel-bin/worker/plateau-worker \
  --rounds "$rounds" 2>/dev/null

echo "== checkpoints: background against blocking writes, the example and 113M parameters at 1, 2 and 4 ranks =="
/usr/bin/python3 tests/bench/checkpoint_bench.py bazel-bin/worker/plateau-worker \
  --rounds "$rounds" 2>/dev/null

echo "== all-to-all-v between 2 rank processes over loopback TCP (Gloo) =="
"$bench/alltoallv_bench"

echo "== vocabulary projection: plain vs Ring-DTP, peaks of forward + backward =="
"$bench/vocab_projection_bench"

echo "== expert dispatch: unchunked vs PipelinedLLEP, uniform and skewed routing =="
"$bench/dispatch_bench" --rounds "$rounds"
"$bench/dispatch_bench" --rounds "$rounds" --ranks 1 --tokens 8192 --cap 2048

echo "== throughput cost of the schedules, each alone and all four (the example model) =="
"$bench/schedules_cost_bench" --steps "$((4 * rounds))"
"$bench/schedules_cost_bench" --steps "$((4 * rounds))" --precision bf16

echo "== the thread pool's hand-off: an empty loop, and a short conversion pooled vs one thread =="
"$bench/thread_pool_bench"

echo "== layer boundaries: plain checkpointing vs SCO, as depth grows, fp32 and bf16 =="
"$bench/checkpoint_offload_bench" --rounds "$rounds"
"$bench/checkpoint_offload_bench" --rounds "$rounds" --precision bf16

echo "== optimizer step: AdamW on the device, serial offload, OffloadStreamAdamW =="
"$bench/optimizer_offload_bench" --rounds "$((2 * rounds))"

echo "== optimizer step and state: AdamW, SkewAdam, Adafactor, Lion (the example model) =="
"$bench/optimizer_step_bench" --rounds "$((10 * rounds))"

echo "== reach: the longest sequence a 256 MiB device trains, plain vs all four schedules, fp32 and bf16 =="
"$bench/reach_bench"

echo "== memory planner: one prediction and a whole plan (what each submit costs plateaud) =="
"$bench/plan_latency_bench" --rounds "$((2 * rounds + 1))"
bazel shutdown
