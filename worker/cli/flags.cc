#include "worker/cli/flags.h"

#include <algorithm>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, device_memory, "4GiB",
          "capacity of each CPU device's memory pool, e.g. 2GiB");
ABSL_FLAG(int32_t, threads, 0,
          "kernel threads per rank (0: this machine's cores divided among "
          "its ranks)");
ABSL_FLAG(int32_t, world, 1,
          "train: local rank processes to launch; must equal the spec's "
          "parallel ep*pp*dp");
ABSL_FLAG(absl::Duration, comm_timeout, absl::Minutes(5),
          "train: how long a rank waits for its peers in any one collective "
          "or rendezvous before failing; must cover rank 0 writing a "
          "checkpoint, which the other ranks wait for");
ABSL_FLAG(std::string, run_dir, "",
          "train: where checkpoints go (default runs/<spec name>)");
ABSL_FLAG(bool, resume, false,
          "train: continue from the newest complete checkpoint in --run_dir");
ABSL_FLAG(std::string, summary_json, "",
          "train, eval: write a machine-readable summary to this file");
ABSL_FLAG(int64_t, log_every, 10, "train: print progress every N steps");
ABSL_FLAG(int32_t, keep_checkpoints, 3,
          "train: complete checkpoints kept in --run_dir (0 keeps all)");
ABSL_FLAG(std::string, weights, "",
          "eval: a checkpoint directory or a safetensors file");
ABSL_FLAG(std::string, tokens, "",
          "eval: a raw little-endian uint32 token file, or a prepared data "
          "directory (its validation split)");
ABSL_FLAG(int64_t, batch_sequences, 8, "eval: windows per forward pass");
ABSL_FLAG(std::string, coordinator, "",
          "agent: plateaud's gRPC address (host:port); runs this worker as "
          "the node's agent");
ABSL_FLAG(std::string, name, "", "agent: this node's name (default: hostname)");
ABSL_FLAG(std::string, devices, "auto",
          "agent: devices to offer: auto, cuda, or cpu:N (N CPU devices of "
          "--device_memory each)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9401",
          "agent: Prometheus /metrics address (port 0 picks a free one)");
ABSL_FLAG(std::string, work_dir, ".",
          "agent: working directory: attempts/ (per node) and runs/ (the "
          "checkpoints, to be shared by every node); relative data paths of "
          "job specs resolve here");
ABSL_FLAG(std::string, token_file, "",
          "agent: file holding this node's plateaud token (or set "
          "PLATEAU_TOKEN); none without auth");
ABSL_FLAG(std::string, ca_cert, "",
          "agent: CA certificate (PEM) to verify plateaud's TLS certificate; "
          "empty for plaintext");

namespace plateau::worker {

int ThreadsPerRank(int local_ranks) {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads > 0) return threads;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_ranks));
}

}  // namespace plateau::worker
