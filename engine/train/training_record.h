// What a training run did, step by step: kept by the trainer, saved in every
// checkpoint (so a resumed run's record is the whole run's), and written as
// the machine-readable summary.
#ifndef PLATEAU_ENGINE_TRAIN_TRAINING_RECORD_H_
#define PLATEAU_ENGINE_TRAIN_TRAINING_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace plateau::engine {

struct StepRecord {
  int64_t step = 0;
  double loss = 0.0;  // cross_entropy + load_balancing + z_loss
  double cross_entropy = 0.0;
  double load_balancing = 0.0;
  double z_loss = 0.0;         // the router z-loss (0 without one)
  double gradient_norm = 0.0;  // before clipping
  double learning_rate = 0.0;
  double seconds = 0.0;  // wall time of the step
  int64_t tokens = 0;
  // Per layer: max / mean over experts of the token copies each received
  // (1 is perfect balance; the load-balancing loss can fall while this
  // rises, so the real load is what we report).
  std::vector<double> expert_load_imbalance;
};

struct ValidationRecord {
  int64_t step = 0;
  double cross_entropy = 0.0;
  double perplexity = 0.0;
  int64_t predicted_tokens = 0;
};

// A checkpoint the run wrote.
struct CheckpointWriteRecord {
  int64_t step = 0;
  // Written in the background (TrainSpec.checkpoint_write).
  bool background = false;
  // How long training stood still for it: the copy of each rank's shards
  // to host memory, any wait for their writes, and the commit.
  double stall_seconds = 0.0;
  // The slowest rank's write of its files (synced).
  double write_seconds = 0.0;
  int64_t bytes_written = 0;       // by all ranks
  int64_t most_bytes_written = 0;  // by one rank
};

struct TrainingRecord {
  std::vector<StepRecord> steps;
  std::vector<ValidationRecord> validations;
  std::vector<CheckpointWriteRecord> checkpoint_writes;
  // Token copies each expert received over all steps: [layer][expert].
  std::vector<std::vector<int64_t>> expert_tokens;

  // Training tokens per second over every step but the first (which pays
  // one-time costs); over all steps when there is only one.
  double TokensPerSecond() const;
};

// Lossless JSON (doubles keep all their digits), for checkpoints.
std::string TrainingRecordToJson(const TrainingRecord& record);
absl::StatusOr<TrainingRecord> TrainingRecordFromJson(const std::string& json);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_TRAINING_RECORD_H_
