// How a rank launched by the worker agent tells it what it is doing: a
// v1::RankStatus (proto/worker.proto) in a file of its own, replaced whole
// (write beside, rename) so the agent, which polls it, never reads a torn
// one. Atomic but not durable: only live processes read it.
#ifndef PLATEAU_WORKER_AGENT_RANK_STATUS_H_
#define PLATEAU_WORKER_AGENT_RANK_STATUS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/train/trainer.h"
#include "proto/worker.pb.h"

namespace plateau::worker {

// "<directory>/rank-<rank>.status".
std::string RankStatusPath(const std::string& directory, int rank);

absl::Status WriteRankStatus(const std::string& path,
                             const v1::RankStatus& status);
// NOT_FOUND until the rank has written one.
absl::StatusOr<v1::RankStatus> ReadRankStatus(const std::string& path);

// The rank side: builds the status from the trainer and writes it at most
// every `interval`, and always when a step ends the run or a new checkpoint
// exists, so the agent never misses one.
class RankStatusPublisher {
 public:
  RankStatusPublisher(std::string path, int rank,
                      std::chrono::milliseconds interval);

  // For TrainerOptions::on_progress. Errors are printed, not returned: a
  // status file that cannot be written must not stop training.
  void OnProgress(engine::Trainer& trainer);
  // Writes now (after the run, whatever its outcome).
  void Publish(engine::Trainer& trainer);

 private:
  v1::RankStatus StatusOf(engine::Trainer& trainer);

  const std::string path_;
  const int rank_;
  const std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_write_{};
  int64_t last_checkpoint_step_ = -1;
  // Steps folded into tokens_per_second so far.
  size_t steps_counted_ = 0;
  double tokens_per_second_ = 0.0;
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_RANK_STATUS_H_
