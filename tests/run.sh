#!/usr/bin/env bash
# The one test command: installs dependencies, builds everything, runs every
# test, and ends with the line "N passed, N failed" counted from the test
# cases' own results. Exits non-zero on any failure. Besides `bazel test
# //...` it checks formatting and the docs' references, fuzzes the job spec
# parser for a bounded time (PLATEAU_FUZZ_SECONDS, default 60; 0 skips), and
# on a machine with the CUDA toolkit also runs the CPU-only build's tests
# (PLATEAU_CPU_ONLY_PASS=0 skips them). Extra arguments go to `bazel test`
# (e.g. tests/run.sh --test_filter=...).
set -uo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }

events_dir=$(mktemp -d)
trap 'rm -rf "$events_dir"; bazel shutdown >/dev/null 2>&1' EXIT
checks=()

# The format check fails when it cannot run: a missing clang-format must not
# read as a formatted tree.
if ! command -v clang-format >/dev/null; then
  echo "clang-format: not installed; the format check cannot run"
  checks+=("clang-format=failed")
elif ! format_report=$(git ls-files '*.cc' '*.h' '*.cu' |
  xargs -r clang-format --dry-run -Werror 2>&1); then
  unformatted=$(grep "error:" <<<"$format_report" | cut -d: -f1 | sort -u)
  echo "clang-format: not formatted (run clang-format -i on them):" \
    ${unformatted:-"(clang-format failed: $format_report)"}
  checks+=("clang-format=failed")
else
  checks+=("clang-format=passed")
fi

# References to the docs (docs/ARCHITECTURE.md's sections, docs/*.md) hold.
if python3 tests/check_references.py; then
  checks+=("doc-references=passed")
else
  checks+=("doc-references=failed")
fi

# `bazel test` builds every target, not only tests; --keep_going makes one
# broken target a counted failure instead of hiding the rest.
bazel test //... --keep_going --build_event_json_file="$events_dir/build.json" "$@"
bazel_status=$?
# Each pass is counted as it ends: a later pass that runs a test again
# overwrites its test.xml.
python3 tests/count_results.py tally "$events_dir/build.json" \
  "$events_dir/build.tally"
tallies=("$events_dir/build.tally")

# Where the CUDA toolkit is, the CPU-only build that machines without it get
# is built and tested too (CUDA_PATH=/nonexistent; bazel/cuda_configure.bzl):
# the tests whose inputs differ there run again, the rest come from the cache.
if [[ -x ${CUDA_PATH:-/usr/local/cuda}/bin/nvcc && ${PLATEAU_CPU_ONLY_PASS:-1} != 0 ]]; then
  CUDA_PATH=/nonexistent bazel test //... --keep_going \
    --build_event_json_file="$events_dir/cpu-only.json" "$@" || bazel_status=1
  python3 tests/count_results.py tally --skip-cached \
    "$events_dir/cpu-only.json" "$events_dir/cpu-only.tally"
  tallies+=("$events_dir/cpu-only.tally")
fi

fuzz_seconds=${PLATEAU_FUZZ_SECONDS:-60}
if ((fuzz_seconds > 0)); then
  if tests/fuzz/run_fuzzer.sh "$fuzz_seconds"; then
    checks+=("job-spec-fuzzer=passed")
  else
    checks+=("job-spec-fuzzer=failed")
  fi
fi

# What this CPU let the tests exercise: a green run on an AVX2-only CPU
# says nothing of the AVX-512 and bf16 kernels.
python3 tests/cpu_paths.py
python3 tests/count_results.py total "${tallies[@]}" "${checks[@]}"
count_status=$?
if [[ $bazel_status -ne 0 || $count_status -ne 0 ]]; then exit 1; fi
