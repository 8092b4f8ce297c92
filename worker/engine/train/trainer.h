// Single-rank training of a job spec: data, model, optimizer, the step loop
// with warmup + cosine learning rate, gradient clipping, validation,
// progress lines, and atomic checkpoints that resume bit for bit.
//
// Determinism: a run is a function of the spec (seed included) and the
// machine's thread count. Batches are a pure function of (seed, step), so a
// run resumed from the checkpoint at step k continues exactly as the
// uninterrupted run would have.
#ifndef PLATEAU_WORKER_ENGINE_TRAIN_TRAINER_H_
#define PLATEAU_WORKER_ENGINE_TRAIN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/engine/backend.h"
#include "worker/engine/data/token_dataset.h"
#include "worker/engine/model/model.h"
#include "worker/engine/optim/optimizer.h"
#include "worker/engine/train/training_record.h"

namespace plateau::engine {

struct TrainerOptions {
  // Checkpoints go to <run_directory>/checkpoints.
  std::string run_directory;
  int64_t device_memory_bytes = int64_t{4} << 30;
  int threads = 2;
  // Continue from the newest complete checkpoint in run_directory (a fresh
  // start when there is none).
  bool resume = false;
  int64_t log_every_steps = 10;
  // Validation uses at most this many windows' worth of tokens.
  int64_t max_validation_tokens = int64_t{1} << 17;
  int keep_checkpoints = 3;
  // When set, becomes true to stop: the trainer finishes its step, writes a
  // checkpoint and returns CANCELLED.
  const std::atomic<bool>* stop_requested = nullptr;
};

class Trainer {
 public:
  // REQUIRES: spec passed ValidateJobSpec. Errors for a spec this build
  // cannot run (several ranks, schedules or optimizers not built yet), for
  // data that does not fit the model, or an unusable checkpoint.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const v1::JobSpec& spec, const TrainerOptions& options,
      std::ostream* log);

  // Trains up to spec.train.steps. DEADLINE_EXCEEDED after
  // spec.train.time_limit and CANCELLED on a stop request, each after
  // writing a checkpoint.
  absl::Status Run();

  const TrainingRecord& record() const { return record_; }
  int64_t completed_steps() const { return completed_steps_; }
  Backend& backend() { return *backend_; }
  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  const TokenDataset& dataset() const { return *dataset_; }
  // The newest checkpoint written or resumed from; empty if none.
  const std::string& last_checkpoint() const { return last_checkpoint_; }

 private:
  Trainer(const v1::JobSpec& spec, const TrainerOptions& options,
          std::ostream* log);

  absl::Status Resume();
  absl::Status TrainStep(int64_t step, std::vector<int32_t>& tokens);
  absl::Status Validate(int64_t step);
  absl::Status WriteCheckpoint();
  void LogStep(const StepRecord& step, double tokens_per_second);
  void LogStartup();

  v1::JobSpec spec_;
  TrainerOptions options_;
  std::ostream* log_;
  int64_t sequences_ = 0;  // per step
  std::unique_ptr<TokenDataset> dataset_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  TrainingRecord record_;
  int64_t completed_steps_ = 0;
  std::string last_checkpoint_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_TRAIN_TRAINER_H_
