#!/usr/bin/env bash
# The main job on a fresh machine. For now (Foundation) it installs the
# dependencies and builds everything that exists; training arrives with the
# engine (worker/engine).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
bazel build //...
echo "quickstart: built. The training engine is not part of this tree yet," \
  "so there is no job to run."
