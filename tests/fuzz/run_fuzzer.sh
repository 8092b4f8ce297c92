#!/usr/bin/env bash
# Builds the job spec fuzz target with clang's libFuzzer, AddressSanitizer,
# LeakSanitizer and UBSan, and fuzzes it for a bounded time. Run by
# tests/run.sh after `bazel test` (which generates the protobuf sources).
# A crash is saved under tests/fuzz/job_spec_regressions/ (to keep as a
# regression input once fixed) and fails the run.
#   tests/fuzz/run_fuzzer.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
generated=bazel-bin
absl_libs=$(ls /usr/lib/x86_64-linux-gnu/libabsl_*.so | sed 's|.*/lib\(.*\)\.so|-l\1|')

clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I. -I"$generated" \
  tests/fuzz/job_spec_fuzzer.cc proto/job_spec.cc proto/job_spec_validation.cc \
  proto/job_spec_internal.cc "$generated/proto/job.pb.cc" \
  "$generated/proto/memory.pb.cc" "$generated/proto/plan.pb.cc" \
  -lyaml-cpp -lprotobuf $absl_libs -o "$work/job_spec_fuzzer"

mkdir -p "$work/corpus"
cp tests/fuzz/job_spec_corpus/* "$work/corpus/"
status=0
(cd "$work" && ./job_spec_fuzzer -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$work/" corpus) >"$work/log" 2>&1 || status=$?
tail -n 12 "$work/log"
if ((status != 0)); then
  for artifact in "$work"/crash-* "$work"/leak-* "$work"/timeout-* \
    "$work"/oom-*; do
    [[ -e "$artifact" ]] || continue
    cp "$artifact" tests/fuzz/job_spec_regressions/
    echo "fuzz: saved $(basename "$artifact") in tests/fuzz/job_spec_regressions/"
  done
  echo "fuzz: FAILED"
  exit 1
fi
echo "fuzz: ${seconds}s without a crash, leak or hang"
