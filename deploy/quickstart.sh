#!/usr/bin/env bash
# The main job on a fresh machine, run the way a user runs one: install what
# Plateau needs, build it, turn the Brown corpus into training data, start a
# local cluster (plateaud with its RocksDB state in .plateau/plateaud, and
# one worker offering two CPU devices), show the memory plan of
# deploy/examples/tiny-moe.yaml (`plateau plan`), submit it with `plateau
# submit --watch`, and evaluate the trained model.
#
# Every process it starts is stopped when it exits, fails or is interrupted
# (Ctrl-C cancels the job first). Running it again starts a new job; the
# earlier ones stay in plateaud's state (`plateau ls` while it runs).
# Ports: PLATEAU_PORT (7070), PLATEAU_METRICS_PORT (9400) and
# PLATEAU_WORKER_METRICS_PORT (9401); all on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
bazel build //daemon:plateaud //worker:plateau-worker //client:plateau
bin=bazel-bin
port=${PLATEAU_PORT:-7070}
metrics_port=${PLATEAU_METRICS_PORT:-9400}
worker_metrics_port=${PLATEAU_WORKER_METRICS_PORT:-9401}
export PLATEAU_COORDINATOR=127.0.0.1:$port
plateau() { "$bin/client/plateau" "$@"; }

if [[ ! -f data/brown/index.json ]]; then
  "$bin/worker/plateau-worker" data prepare --input data/corpus/brown \
    --output data/brown --vocab 4096
fi

state=.plateau
mkdir -p "$state"
daemon_pid=""
worker_pid=""
# Ids of this cluster's jobs that have not ended.
live_jobs() {
  plateau ls -o json | python3 -c '
import json, sys
live = ("JOB_STATE_QUEUED", "JOB_STATE_SCHEDULED", "JOB_STATE_RUNNING")
print(" ".join(job["id"] for job in json.load(sys.stdin).get("jobs", [])
               if job["state"] in live))'
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n $daemon_pid ]]; then
    for job in $(live_jobs 2>/dev/null); do
      echo "quickstart: cancelling $job"
      plateau cancel "$job" >/dev/null || true
    done
  fi
  for pid in $worker_pid $daemon_pid; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() {  # wait_for WHAT COMMAND...: up to 30 s
  local what=$1
  shift
  for _ in $(seq 150); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "quickstart: $what did not come up; see $state/*.log" >&2
  return 1
}

# Sessions of their own: Ctrl-C reaches this script alone, which cancels
# the job before it stops them.
setsid "$bin/daemon/plateaud" --listen "127.0.0.1:$port" \
  --metrics_listen "127.0.0.1:$metrics_port" --data_dir "$state/plateaud" \
  >>"$state/plateaud.log" 2>&1 &
daemon_pid=$!
wait_for "plateaud on port $port" plateau ls
setsid "$bin/worker/plateau-worker" --coordinator "127.0.0.1:$port" --name local \
  --devices cpu:2 --device_memory 2GiB \
  --metrics_listen "127.0.0.1:$worker_metrics_port" --work_dir "$PWD" \
  >>"$state/worker.log" 2>&1 &
worker_pid=$!
wait_for "the worker" bash -c \
  "'$bin/client/plateau' nodes | grep -Eq '^local +READY'"

cat <<EOF
quickstart: plateaud on 127.0.0.1:$port; one worker, 'local', with 2 CPU devices
  web:     http://127.0.0.1:$metrics_port/ (jobs, loss and tokens/s over time, memory by component, nodes)
  metrics: http://127.0.0.1:$metrics_port/metrics (plateaud: jobs, nodes, queue)
           http://127.0.0.1:$worker_metrics_port/metrics (worker: memory peaks by component, tokens/s, loss)
  logs:    $state/plateaud.log, $state/worker.log
  meanwhile, in another shell: export PLATEAU_COORDINATOR=$PLATEAU_COORDINATOR
           then $bin/client/plateau ls | describe JOB | logs -f JOB | nodes
EOF
# The memory plan for the worker's devices, as plateaud admits the job.
plateau plan deploy/examples/tiny-moe.yaml
watch_status=0
plateau submit deploy/examples/tiny-moe.yaml --watch || watch_status=$?
job_id=$(plateau ls -o json | python3 -c '
import json, sys
print(json.load(sys.stdin)["jobs"][0]["id"])')
plateau describe "$job_id"
if ((watch_status != 0)); then
  echo "quickstart: $job_id did not succeed (plateau exited $watch_status)" >&2
  exit "$watch_status"
fi

latest=$(ls -d "runs/$job_id/checkpoints/step-"* | tail -n 1)
echo "evaluating $latest on the validation split of data/brown"
"$bin/worker/plateau-worker" eval deploy/examples/tiny-moe.yaml \
  --weights "$latest" --tokens data/brown
bazel shutdown
