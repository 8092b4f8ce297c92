// Checkpoints written in the background (train.checkpoint_write), on the
// CPU backend: training goes on while a write is held back, and the write
// is committed at a later step; the files are the bytes a blocking write
// makes, and the run ends as the blocking run does; a stop commits the
// write in flight before its own; a failed write ends the run naming its
// step and rank, and the checkpoint before stays the newest.
#include <atomic>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/data/random_token_dataset.h"
#include "engine/train/held_checkpoint_writes.h"
#include "engine/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job_spec.h"

namespace plateau::engine {
namespace {

using ::plateau::testing::ListTestDirectory;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class BackgroundCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    *data_ = MakeTestDirectory("background-checkpoint-data");
    testing::WriteRandomTokenDataset(*data_, /*vocab=*/64, int64_t{1} << 14,
                                     2048, /*seed=*/3);
  }

  v1::JobSpec Spec(int64_t steps, const char* checkpoint_write) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(
        "name: background\n"
        "model: {layers: 2, d_model: 16, heads: 2, experts: 4, top_k: 2, "
        "ffn_hidden: 16, vocab: 64, seq_len: 16}\n"
        "optimizer: {kind: skewadam}\n"
        "data: {path: ",
        *data_,
        ", batch_tokens: 64}\n"
        "train: {steps: ",
        steps, ", checkpoint_every: 2, eval_every: 0, checkpoint_write: ",
        checkpoint_write, "}\n"));
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  static std::string* data_;
};

std::string* BackgroundCheckpointTest::data_ = new std::string;

struct RunResult {
  absl::Status status;
  TrainingRecord record;
  int64_t last_checkpoint_step = 0;
};

RunResult Train(const v1::JobSpec& spec, TrainerOptions options) {
  std::ostringstream log;
  RunResult result;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(spec, options, &log);
  if (!trainer.ok()) {
    result.status = trainer.status();
    return result;
  }
  result.status = (*trainer)->Run();
  result.record = (*trainer)->record();
  result.last_checkpoint_step = (*trainer)->last_checkpoint_step();
  return result;
}

std::vector<int64_t> WrittenSteps(const TrainingRecord& record) {
  std::vector<int64_t> steps;
  for (const CheckpointWriteRecord& write : record.checkpoint_writes) {
    steps.push_back(write.step);
  }
  return steps;
}

std::string ShardFile(const std::string& run, int64_t step, const char* part) {
  return absl::StrCat(CheckpointDirectory(run, step), "/", part,
                      ".rank-00000.safetensors");
}

TEST_F(BackgroundCheckpointTest, TrainingGoesOnWhileAWriteIsHeld) {
  const std::string background_run = MakeTestDirectory("background-run");
  HeldCheckpointWrites held(/*step=*/2, HeldCheckpointWrites::Mode::kHold);
  TrainerOptions options;
  options.run_directory = background_run;
  options.checkpoint_file_system = &held;
  // After step 3 the write of step 2's checkpoint is still held: nothing is
  // committed, and its snapshot is held beside the step.
  int64_t committed_after_step_3 = -1;
  int64_t snapshot_bytes_after_step_3 = 0;
  options.on_progress = [&](Trainer& trainer) {
    if (trainer.completed_steps() != 3) return;
    committed_after_step_3 = trainer.last_checkpoint_step();
    snapshot_bytes_after_step_3 =
        trainer.backend()
            .allocator()
            .Usage(MemoryPool::kHost, MemoryComponent::kSnapshot)
            .current_bytes;
    held.Release();
  };
  const RunResult background = Train(Spec(4, "background"), options);
  ASSERT_TRUE(background.status.ok()) << background.status;
  EXPECT_EQ(committed_after_step_3, 0);
  EXPECT_GT(snapshot_bytes_after_step_3, 0);
  EXPECT_EQ(background.last_checkpoint_step, 4);
  EXPECT_THAT(WrittenSteps(background.record), ElementsAre(2, 4));
  // The last step's checkpoint ends the run: training waits for it.
  EXPECT_TRUE(background.record.checkpoint_writes[0].background);
  EXPECT_FALSE(background.record.checkpoint_writes[1].background);
  for (const CheckpointWriteRecord& write :
       background.record.checkpoint_writes) {
    EXPECT_GT(write.write_seconds, 0.0);
  }

  const std::string blocking_run = MakeTestDirectory("blocking-run");
  TrainerOptions blocking_options;
  blocking_options.run_directory = blocking_run;
  const RunResult blocking = Train(Spec(4, "blocking"), blocking_options);
  ASSERT_TRUE(blocking.status.ok()) << blocking.status;
  EXPECT_FALSE(blocking.record.checkpoint_writes[0].background);
  ASSERT_EQ(blocking.record.steps.size(), background.record.steps.size());
  for (size_t i = 0; i < blocking.record.steps.size(); ++i) {
    EXPECT_EQ(background.record.steps[i].loss, blocking.record.steps[i].loss)
        << "step " << i + 1;
  }
  for (const int64_t step : {2, 4}) {
    for (const char* part : {"model", "optimizer"}) {
      EXPECT_EQ(ReadTestFile(ShardFile(background_run, step, part)),
                ReadTestFile(ShardFile(blocking_run, step, part)))
          << part << " of step " << step;
    }
  }
}

TEST_F(BackgroundCheckpointTest, AStopCommitsTheWriteInFlightFirst) {
  const std::string run = MakeTestDirectory("stopped-run");
  HeldCheckpointWrites held(/*step=*/2, HeldCheckpointWrites::Mode::kHold);
  std::atomic<bool> stop{false};
  TrainerOptions options;
  options.run_directory = run;
  options.checkpoint_file_system = &held;
  options.stop_requested = &stop;
  options.on_progress = [&](Trainer& trainer) {
    if (trainer.completed_steps() != 3) return;
    stop = true;
    held.Release();
  };
  const RunResult stopped = Train(Spec(10, "background"), options);
  EXPECT_EQ(stopped.status.code(), absl::StatusCode::kCancelled)
      << stopped.status;
  EXPECT_EQ(stopped.last_checkpoint_step, 3);
  EXPECT_THAT(WrittenSteps(stopped.record), ElementsAre(2, 3));
  EXPECT_THAT(
      ListTestDirectory(run + "/checkpoints"),
      ElementsAre(CheckpointDirectoryName(2), CheckpointDirectoryName(3)));
}

TEST_F(BackgroundCheckpointTest, AFailedWriteEndsTheRunAndKeepsTheOneBefore) {
  const std::string run = MakeTestDirectory("failed-run");
  HeldCheckpointWrites failing(/*step=*/4, HeldCheckpointWrites::Mode::kFail);
  TrainerOptions options;
  options.run_directory = run;
  options.checkpoint_file_system = &failing;
  const RunResult failed = Train(Spec(8, "background"), options);
  EXPECT_EQ(failed.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(failed.status.message(),
              HasSubstr("cannot write checkpoint of step 4"));
  EXPECT_THAT(failed.status.message(), HasSubstr("rank 0's shard"));
  EXPECT_EQ(failed.last_checkpoint_step, 2);
  // The failed write's staging directory is gone; step 2's stays.
  EXPECT_THAT(ListTestDirectory(run + "/checkpoints"),
              ElementsAre(CheckpointDirectoryName(2)));
  absl::StatusOr<std::unique_ptr<Checkpoint>> newest =
      OpenLatestCheckpoint(run);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ((*newest)->step(), 2);
}

}  // namespace
}  // namespace plateau::engine
