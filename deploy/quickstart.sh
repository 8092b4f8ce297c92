#!/usr/bin/env bash
# The main job on a fresh machine: install what Plateau needs, build it,
# turn the Brown corpus into training data, train the example MoE
# (deploy/examples/tiny-moe.yaml) on the CPU backend, and evaluate the result.
#
# Re-running continues from the newest checkpoint in runs/tiny-moe (a
# finished run is not trained again). Extra arguments go to
# `plateau-worker train`, e.g. deploy/quickstart.sh --device_memory=2GiB.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
bazel build //worker:plateau-worker
worker=bazel-bin/worker/plateau-worker

if [[ ! -f data/brown/index.json ]]; then
  "$worker" data prepare --input data/corpus/brown --output data/brown \
    --vocab 4096
fi

"$worker" train deploy/examples/tiny-moe.yaml --run_dir runs/tiny-moe \
  --resume --summary_json runs/tiny-moe/summary.json "$@"

latest=$(ls -d runs/tiny-moe/checkpoints/step-* | tail -n 1)
echo "evaluating $latest on the validation split of data/brown"
"$worker" eval deploy/examples/tiny-moe.yaml --weights "$latest" \
  --tokens data/brown
echo "summary: runs/tiny-moe/summary.json"
bazel shutdown
