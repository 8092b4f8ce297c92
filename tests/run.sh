#!/usr/bin/env bash
# The one test command: installs dependencies, builds everything, runs every
# test, and ends with the line "N passed, N failed" counted from the test
# cases' own results. Exits non-zero on any failure. Besides `bazel test
# //...` it checks formatting and fuzzes the job spec parser for a bounded
# time (PLATEAU_FUZZ_SECONDS, default 60; 0 skips). Extra arguments go to
# `bazel test` (e.g. tests/run.sh --test_filter=...).
set -uo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }

events=$(mktemp)
trap 'rm -f "$events"; bazel shutdown >/dev/null 2>&1' EXIT
checks=()

unformatted=$(git ls-files '*.cc' '*.h' '*.cu' |
  xargs -r clang-format --dry-run -Werror 2>&1 | grep "error:" |
  cut -d: -f1 | sort -u)
if [[ -n "$unformatted" ]]; then
  echo "clang-format: not formatted (run clang-format -i on them):" $unformatted
  checks+=("clang-format=failed")
else
  checks+=("clang-format=passed")
fi

# `bazel test` builds every target, not only tests; --keep_going makes one
# broken target a counted failure instead of hiding the rest.
bazel test //... --keep_going --build_event_json_file="$events" "$@"
bazel_status=$?

fuzz_seconds=${PLATEAU_FUZZ_SECONDS:-60}
if ((fuzz_seconds > 0)); then
  if tests/fuzz/run_fuzzer.sh "$fuzz_seconds"; then
    checks+=("job-spec-fuzzer=passed")
  else
    checks+=("job-spec-fuzzer=failed")
  fi
fi

python3 tests/count_results.py "$events" "${checks[@]}"
count_status=$?
if [[ $bazel_status -ne 0 || $count_status -ne 0 ]]; then exit 1; fi
