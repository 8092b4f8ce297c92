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

namespace plateau::worker {

int ThreadsPerRank(int local_ranks) {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads > 0) return threads;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_ranks));
}

}  // namespace plateau::worker
