// Training of a job spec by one rank of its job (all of it when the spec
// asks for one rank): data, model shard, optimizer shard, the step loop with
// warmup + cosine learning rate, gradient clipping, validation, progress
// lines, and atomic checkpoints that resume bit for bit. Every rank of a job
// runs a Trainer with the same spec and options except `rank`; all of them
// call Run, which is collective.
//
// A fresh run starts from the seed's random weights, or from spec.init_from's
// (a Hugging Face directory, hf_model_directory.h) with fresh optimizer
// state; a resumed one from its checkpoint's.
//
// Determinism: a run is a function of the spec (seed included), the
// parallel layout and the machine's kernels (its CPU type or GPU), not of
// the ranks' thread counts (kernels/ops.h). Batches are a pure function
// of (seed, step), so a run resumed from the checkpoint at step k continues
// exactly as the uninterrupted run would have. Checkpoints are sharded
// (engine/checkpoint/sharded_checkpoint.h): every rank copies the chunks of
// its ZeRO shards to host memory (component `snapshot`) and writes them,
// and rank 0 commits once every rank's files are durable, so no rank holds
// more than its own shards. The writes run in the background
// (background_shard_writer.h) while training goes on; the ranks agree
// before each step whether every write has ended, and commit then. A stop,
// a time limit and the last step wait for the write in flight and commit
// it. Any layout resumes any checkpoint: each rank reads only the chunks'
// blocks that hold its shards, and the replicas of its weights are
// gathered as after a step. A checkpoint that a rank finds
// damaged is passed over for the previous one.
#ifndef PLATEAU_ENGINE_TRAIN_TRAINER_H_
#define PLATEAU_ENGINE_TRAIN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "engine/backend.h"
#include "engine/checkpoint/run_fence.h"
#include "engine/data/token_dataset.h"
#include "engine/model/model.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/zero_shards.h"
#include "engine/train/background_shard_writer.h"
#include "engine/train/model_io.h"
#include "engine/train/rank_context.h"
#include "engine/train/training_record.h"
#include "engine/train/training_step.h"
#include "proto/job.pb.h"

namespace plateau::engine {

class Trainer;

struct TrainerOptions {
  // Checkpoints go to <run_directory>/checkpoints (shared by every rank).
  std::string run_directory;
  // The CPU backend's, when create_backend is unset.
  int64_t device_memory_bytes = int64_t{4} << 30;
  int threads = 2;
  // Makes this rank's backend (the CUDA one, say); unset: the CPU backend.
  BackendFactory create_backend;
  // Continue from the newest complete checkpoint in run_directory (a fresh
  // start when there is none). Without it a run directory that already
  // holds checkpoints is refused, so nothing is overwritten by mistake.
  bool resume = false;
  int64_t log_every_steps = 10;
  // Validation uses at most this many windows' worth of tokens.
  int64_t max_validation_tokens = int64_t{1} << 17;
  int keep_checkpoints = 3;
  // The plateaud attempt this run is (0: a run outside plateaud). Rank 0
  // claims the run directory for it before it looks for checkpoints, and
  // commits every checkpoint under that fence (run_fence.h), so that a
  // replaced attempt can no longer change the directory.
  int64_t attempt = 0;
  // When set, becomes true to stop: the trainer finishes its step, writes a
  // checkpoint and returns CANCELLED. Every rank must see it at the same
  // step: Run agrees on it over the world before each step.
  const std::atomic<bool>* stop_requested = nullptr;
  // This rank of the spec's ep x pp x dp layout and its connected groups
  // (must outlive the trainer); a one-rank spec needs none.
  int rank = 0;
  RankGroups* groups = nullptr;
  // When set, called on this rank once the run is set up and after every
  // step (its validation and checkpoint included), e.g. to publish progress
  // to the worker agent. Must return quickly.
  std::function<void(Trainer&)> on_progress;
  // The file system this rank's checkpoint shards are written through
  // (fault tests inject failures); null: the real one.
  FileSystem* checkpoint_file_system = nullptr;
  // Why the spec's precision runs (plateaud's or the launcher's choice for
  // precision: auto, plan/precision_choice.h), for the log; "" if not said.
  std::string precision_reason;
};

// The spec's parallel sizes. REQUIRES: spec passed ValidateJobSpec.
ParallelSizes ParallelSizesOf(const v1::JobSpec& spec);

class Trainer {
 public:
  // REQUIRES: spec passed ValidateJobSpec. Errors for a spec this build
  // cannot run (schedules or optimizers not built yet), a `schedules: auto`
  // spec whose schedules have not been planned, missing groups, data that
  // does not fit the model, or an unusable checkpoint. Collective.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const v1::JobSpec& spec, const TrainerOptions& options,
      std::ostream* log);

  // Trains up to spec.train.steps. DEADLINE_EXCEEDED after
  // spec.train.time_limit and CANCELLED on a stop request, each after
  // writing a checkpoint. Only rank 0 writes progress to the log.
  absl::Status Run();

  const v1::JobSpec& spec() const { return spec_; }
  const TrainingRecord& record() const { return record_; }
  int64_t completed_steps() const { return completed_steps_; }
  Backend& backend() { return *backend_; }
  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  const TokenDataset& dataset() const { return *dataset_; }
  // The newest checkpoint written or resumed from; empty if none.
  const std::string& last_checkpoint() const { return last_checkpoint_; }
  // Its step; 0 if none.
  int64_t last_checkpoint_step() const { return last_checkpoint_step_; }
  // Bytes this rank wrote for the newest checkpoint this run wrote; 0 if
  // none.
  int64_t last_checkpoint_bytes_written() const {
    return last_checkpoint_bytes_written_;
  }

 private:
  Trainer(const v1::JobSpec& spec, const TrainerOptions& options,
          std::ostream* log);

  // Everything of Create that is this rank's alone.
  absl::Status SetUp();
  absl::Status StartFromCheckpoints();
  absl::Status LoadCheckpoint(const std::string& directory);
  // spec.init_from's weights, at a start without a checkpoint.
  absl::Status LoadInitialWeights();
  // Where loaded weights go: this rank's weights in the model and, where
  // the optimizer keeps them, its master weights (Optimizer::MasterPieces).
  std::vector<TensorPiece> WeightTargets();
  // What the ranks agree on before each step (one all-reduce): to stop, or
  // to commit the checkpoint in flight, whose every rank's write has ended.
  struct BeforeStep {
    bool stop = false;
    bool commit = false;
  };
  absl::StatusOr<BeforeStep> AgreeBeforeStep();
  absl::Status TrainStep(int64_t step, std::vector<int32_t>* tokens);
  absl::Status Validate(int64_t step);
  // A checkpoint of the completed steps, written and committed before it
  // returns (the write in flight, if any, is committed first).
  absl::Status WriteCheckpoint();
  // Copies this rank's shards to host memory (every rank agreeing that the
  // copies succeeded) and starts their write on the writer's thread; a
  // write still in flight is finished first. Committed by FinishCheckpoint;
  // `background`: training goes on meanwhile (the record says so). Nothing
  // for a step already saved or in flight. Collective.
  absl::Status StartCheckpoint(bool background);
  // Waits for the write in flight, agrees that every rank's ended well and
  // commits it (rank 0). Collective.
  absl::Status FinishCheckpoint();
  // Rank 0's state.json as of the completed steps.
  std::string StateJson() const;
  // A checkpoint started and not committed yet.
  struct PendingCheckpoint {
    int64_t step = 0;
    bool background = false;
    std::string staging;
    std::string state_json;  // rank 0's, as of `step`
    // Training stood still this long to copy the shards.
    double stall_seconds = 0.0;
  };
  // Rank 0, once every rank has written its shard.
  absl::Status CommitCheckpoint(const PendingCheckpoint& pending);
  // OK when every rank's `status` is; else this rank's error, or one saying
  // which rank failed. Collective; `all_reported`, if given, is set when
  // every rank's outcome arrived (the collective itself did not fail).
  absl::Status AgreeOnOutcome(const absl::Status& status, const char* what,
                              bool* all_reported = nullptr);
  void LogStep(const StepRecord& step, double tokens_per_second);
  void LogStartup();
  std::ostream& log() { return ranks_.rank == 0 ? *log_ : null_log_; }
  // What only this rank knows (the damage it found): rank 0's log, the
  // other ranks' stderr.
  std::ostream& rank_log();

  v1::JobSpec spec_;
  TrainerOptions options_;
  std::ostream* log_;
  std::ostream null_log_{nullptr};
  RankContext ranks_;
  int64_t sequences_ = 0;  // per step, over all ranks
  int64_t validation_windows_ = 0;
  std::unique_ptr<TokenDataset> dataset_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ZeroShards> shards_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<TrainingStep> step_;
  TrainingRecord record_;
  int64_t completed_steps_ = 0;
  std::string last_checkpoint_;
  int64_t last_checkpoint_step_ = 0;
  int64_t last_checkpoint_bytes_written_ = 0;
  // What the loaded checkpoint says made it (its backend's kernels and the
  // products' precision); "" when it does not say.
  std::string checkpoint_kernels_;
  std::string checkpoint_precision_;
  // Of the loaded checkpoint: the bytes of its chunks this rank read, and
  // of all its tensor files.
  int64_t checkpoint_bytes_read_ = 0;
  int64_t checkpoint_bytes_ = 0;
  std::optional<RunFence> fence_;  // rank 0's
  // Names this run's checkpoint writes (ShardStagingDirectory): the same on
  // every rank, another for every run.
  std::string write_id_;
  // train.checkpoint_write is not blocking.
  bool background_checkpoints_ = true;
  std::optional<PendingCheckpoint> pending_checkpoint_;
  // After backend_: its snapshot is freed before the allocator goes.
  BackgroundShardWriter writer_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_TRAINER_H_
