// The machine-readable summary that `plateau-worker train` and `eval` write
// with --summary_json: what ran, how it ended, losses, throughput, and the
// memory accounting (peak and final bytes per pool and component).
#ifndef PLATEAU_ENGINE_TRAIN_RUN_SUMMARY_H_
#define PLATEAU_ENGINE_TRAIN_RUN_SUMMARY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/train/evaluation.h"
#include "engine/train/training_record.h"

namespace plateau::engine {

struct RunSummary {
  std::string command;  // "train" or "eval"
  absl::Status status;
  const TrainingRecord* training = nullptr;       // train only
  std::optional<EvaluationResult> evaluation;     // eval only
  const AccountedAllocator* allocator = nullptr;  // null if none was made
  std::map<std::string, int64_t> optimizer_state_bytes;  // by tier
  std::string checkpoint;  // the last one written or read
};

std::string RunSummaryToJson(const RunSummary& summary);

// Writes the JSON to `path` atomically.
absl::Status WriteRunSummary(const std::string& path,
                             const RunSummary& summary);

// Replaces the status in the summary at `path` (keeping everything else
// rank 0 wrote there), or writes a summary of just `summary` when there is
// none or it is unreadable. For the launcher of several ranks, which knows
// best why the group failed.
absl::Status ReplaceRunSummaryStatus(const std::string& path,
                                     const RunSummary& summary);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_RUN_SUMMARY_H_
