#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in two halves:
#
#   tests/gpu/run.sh --prepare [BUNDLE]   on a build machine (this project's,
#       no GPU needed): builds the GPU test and benchmark binaries and packs
#       them, with every shared library they need but the CUDA driver, cuBLAS
#       and NCCL, into BUNDLE (default .gpu-bundle.tar.xz, git-ignored).
#   tests/gpu/run.sh [BUNDLE]             on the GPU machine (which has CUDA
#       13 and its libraries, not Bazel): unpacks the bundle and runs, on the
#       first GPU, the parity tests of every CUDA op against the CPU backend,
#       the CUDA backend's memory checks, the training step on CUDA (the four
#       schedules' exactness, and the step against the CPU backend), NCCL on
#       one rank, and the benchmarks; logs go to $OUT (default
#       /tmp/plateau-gpu-out), a table last. Exit status 1 if anything failed.
#
# Every step has a time limit; all of them together stay under 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."

readonly TESTS=(
  //kernels/cuda:cuda_ops_test
  //engine:cuda_backend_test
  //engine/train:training_step_cuda_test
  //engine/parallel:nccl_communicator_test
  //tests/gpu:cuda_benchmarks_test
)
readonly BENCH=//tests/gpu:cuda_bench

binary_of() {  # //a/b:c -> bazel-bin/a/b/c
  local label=${1#//}
  echo "bazel-bin/${label%%:*}/${label##*:}"
}

prepare() {
  local bundle=${1:-.gpu-bundle.tar.xz}
  deploy/install-deps.sh || exit 1
  local cuda_path=${CUDA_PATH:-/usr/local/cuda}
  if [[ ! -x $cuda_path/bin/nvcc ]]; then
    echo "tests/gpu/run.sh --prepare: needs the CUDA toolkit ($cuda_path/bin/nvcc" \
      "is missing; set CUDA_PATH to where it is)" >&2
    exit 1
  fi
  bazel build "${TESTS[@]}" "$BENCH" || exit 1
  local staging
  staging=$(mktemp -d)
  mkdir -p "$staging/bin" "$staging/lib" "$staging/lib-fallback"
  for label in "${TESTS[@]}" "$BENCH"; do
    cp "$(binary_of "$label")" "$staging/bin/"
  done
  # What the binaries load: Bazel's libraries and Debian's, OpenBLAS
  # (dlopen'ed by the CPU backend) and its own; not glibc, the driver,
  # cuBLAS or NCCL, which the GPU machine has (the last two too large). The
  # C++ runtime goes apart: the GPU machine's own, if new enough, must win
  # (its CUDA libraries may need a newer one).
  local openblas
  openblas=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)
  cp "$openblas" "$staging/lib/libopenblas.so.0"
  local label
  for label in "${TESTS[@]}" "$BENCH"; do
    ldd "$(binary_of "$label")"
  done | cat - <(ldd "$openblas") | awk '$3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
        ld-linux* | libcuda.so* | libcublas.so* | libcublasLt.so* | \
        libnccl.so*) ;;
      libstdc++.so* | libgcc_s.so*) cp -L "$path" "$staging/lib-fallback/" ;;
      *) cp -L "$path" "$staging/lib/$name" ;;
    esac
  done
  tar -C "$staging" -cJf "$bundle" bin lib lib-fallback
  rm -rf "$staging"
  bazel shutdown >/dev/null 2>&1
  echo "tests/gpu/run.sh: packed $(du -h "$bundle" | cut -f1) into $bundle;" \
    "carry it to the GPU machine and run tests/gpu/run.sh there"
}

# Directories holding cuBLAS and NCCL on the GPU machine: the toolkit's, or
# the pip wheels' of the Python that has PyTorch.
cuda_library_dirs() {
  local candidates=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib
    /usr/lib/x86_64-linux-gnu)
  local site
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' \
    2>/dev/null); do
    candidates+=("$site"/nvidia/*/lib)
  done
  local dirs=""
  for dir in "${candidates[@]}"; do
    if ls "$dir"/libcublas.so.13* "$dir"/libnccl.so.2* "$dir"/libcudart.so.13* \
      >/dev/null 2>&1; then
      dirs="$dirs:$dir"
    fi
  done
  echo "${dirs#:}"
}

results=()
failed=0

# run_step NAME SECONDS COMMAND...: logs to $OUT/NAME.log; a gtest binary's
# result line becomes the table's entry.
run_step() {
  local name=$1 seconds=$2
  shift 2
  local log="$OUT/$name.log"
  local start=$SECONDS
  timeout "$seconds" "$@" >"$log" 2>&1
  local status=$?
  local took=$((SECONDS - start))
  local summary
  summary=$(grep -E '^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]' "$log" |
    sed 's/^\[ *\([A-Z]*\) *\] /\1 /' | tr '\n' ' ')
  if ((status == 124)); then
    summary="TIMED OUT after ${seconds}s; $summary"
  fi
  if ((status != 0)); then
    failed=1
    results+=("$(printf '%-28s FAILED (exit %d, %ds)  %s' "$name" "$status" \
      "$took" "$summary")")
    echo "--- $name failed; the end of $log:"
    tail -n 30 "$log"
  else
    results+=("$(printf '%-28s ok (%ds)  %s' "$name" "$took" "$summary")")
  fi
}

run_checks() {
  local bundle=${1:-.gpu-bundle.tar.xz}
  OUT=${OUT:-/tmp/plateau-gpu-out}
  mkdir -p "$OUT"
  if [[ ! -f "$bundle" ]]; then
    echo "tests/gpu/run.sh: no bundle $bundle: run tests/gpu/run.sh --prepare" \
      "on a build machine and carry it here" >&2
    exit 1
  fi
  local root=/tmp/plateau-gpu
  rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xJf "$bundle" || exit 1
  local cuda_dirs
  cuda_dirs=$(cuda_library_dirs)
  # The build machine's C++ runtime only where this one's is older (it lacks
  # GCC 12's GLIBCXX_3.4.30).
  local libstdcxx
  libstdcxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 /{print $NF; exit}')
  if [[ -z "$libstdcxx" ]] || ! grep -qa GLIBCXX_3.4.30 "$libstdcxx"; then
    cuda_dirs="$root/lib-fallback${cuda_dirs:+:$cuda_dirs}"
  fi
  export LD_LIBRARY_PATH="$root/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
      --format=csv
    ldd --version | head -n 1
    echo "library path: $LD_LIBRARY_PATH"
  } >"$OUT/machine.log" 2>&1
  cat "$OUT/machine.log"
  local bin=$root/bin
  run_step cuda_ops 60 "$bin/cuda_ops_test"
  run_step cuda_backend 30 "$bin/cuda_backend_test"
  run_step training_step 90 "$bin/training_step_cuda_test"
  run_step nccl 45 "$bin/nccl_communicator_test"
  run_step benchmarks_smoke 30 "$bin/cuda_benchmarks_test"
  run_step benchmarks 200 "$bin/cuda_bench" --json="$OUT/benchmarks.json"
  echo
  echo "==== CUDA backend on $(head -n 2 "$OUT/machine.log" | tail -n 1)"
  printf '%s\n' "${results[@]}"
  if [[ -s "$OUT/benchmarks.log" ]]; then
    echo "---- benchmarks (value vs baseline, ratio):"
    grep -E '^(grouped_gemm|vocab_projection|adamw|training)(_bf16)? ' \
      "$OUT/benchmarks.log"
  fi
  exit "$failed"
}

if [[ "${1:-}" == "--prepare" ]]; then
  prepare "${2:-}"
else
  run_checks "${1:-}"
fi
