#!/usr/bin/env bash
# Runs a Python test with the system Python (the one deploy/install-deps.sh
# installs packages for): run_python_test.sh SCRIPT ARGS...
set -euo pipefail
exec /usr/bin/python3 "$@"
