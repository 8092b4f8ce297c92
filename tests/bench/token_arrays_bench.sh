#!/usr/bin/env bash
# `data prepare --tokens` on token arrays of two sizes: tokens/s, and the
# peak resident memory of the process, which must not grow with the input
# (the arrays are mapped and given back as they are read).
#   tests/bench/token_arrays_bench.sh [MILLIONS_OF_TOKENS]   (default 100)
# Writes two raw uint16 arrays (N and 2N million ids of a GPT-2-sized
# vocabulary, a document every thousand ids on average) in a scratch
# directory, 2 bytes an id.
set -euo pipefail
cd "$(dirname "$0")/../.."
millions=${1:-100}
bazel build -c opt //worker:plateau-worker
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for scale in 1 2; do
  tokens=$((scale * millions * 1000000))
  /usr/bin/python3 - "$tokens" "$scratch/train.bin" <<'EOF'
import sys
import numpy
tokens, path = int(sys.argv[1]), sys.argv[2]
rng = numpy.random.default_rng(1)
ids = rng.integers(0, 50256, size=tokens, dtype=numpy.uint16)
ids[rng.integers(0, tokens, size=tokens // 1000)] = 50256
ids.tofile(path)
EOF
  /usr/bin/time -f "%M KiB peak resident" \
    bazel-bin/worker/plateau-worker data prepare \
    --tokens "$scratch/train.bin" --token_dtype uint16 --vocab 50304 \
    --separator_id 50256 --output "$scratch/dataset" --overwrite 2>&1 |
    sed "s/^/$((scale * millions))M ids: /"
done
