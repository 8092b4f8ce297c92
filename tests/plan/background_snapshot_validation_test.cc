// A checkpoint written in the background (train.checkpoint_write) keeps its
// snapshot in host memory until the write ends, across later steps when the
// write outlasts them. The plan holds the snapshot through a whole step.
// On the CPU backend, one rank trains with its optimizer offloaded (its
// masters and moments in host memory beside the snapshot) and SCO (its
// layer boundaries there during a step), while step 2's write is held
// through step 3. Its measured host peak is within 5% of the background
// plan's, and above what the blocking plan holds.
#include <cstdint>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "engine/data/random_token_dataset.h"
#include "engine/train/held_checkpoint_writes.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "plan/memory_model.h"
#include "proto/job_spec.h"

namespace plateau {
namespace {

using engine::MemoryComponent;
using engine::MemoryPool;

constexpr double kBound = 0.05;

v1::JobSpec Spec(const std::string& data, const char* checkpoint_write) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(
      "name: held-snapshot\n"
      "model: {layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2, "
      "ffn_hidden: 128, vocab: 1024, seq_len: 128}\n"
      "schedules: {optimizer_offload: stream, sco: true}\n"
      "data: {path: ",
      data,
      ", batch_tokens: 256}\n"
      "train: {steps: 4, checkpoint_every: 2, eval_every: 0, "
      "checkpoint_write: ",
      checkpoint_write, "}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

int64_t PredictedHostPeak(const v1::JobSpec& spec) {
  absl::StatusOr<v1::MemoryPrediction> prediction =
      plan::PredictMemory(spec, plan::Routing::WorstCase());
  EXPECT_TRUE(prediction.ok()) << prediction.status();
  return prediction.ok() ? prediction->ranks(0).host_peak_bytes() : 0;
}

TEST(BackgroundSnapshotValidationTest, ASnapshotHeldThroughAStepIsPlanned) {
  const std::string data = testing::MakeTestDirectory("held-snapshot-data");
  engine::testing::WriteRandomTokenDataset(data, /*vocab=*/1024,
                                           int64_t{1} << 14, 2048,
                                           /*seed=*/5);
  const v1::JobSpec spec = Spec(data, "background");
  engine::HeldCheckpointWrites held(
      /*step=*/2, engine::HeldCheckpointWrites::Mode::kHold);
  engine::TrainerOptions options;
  options.run_directory = testing::MakeTestDirectory("held-snapshot-run");
  options.device_memory_bytes = int64_t{8} << 30;
  options.threads = 1;
  options.checkpoint_file_system = &held;
  int64_t snapshot_bytes_after_step_3 = 0;
  options.on_progress = [&](engine::Trainer& trainer) {
    if (trainer.completed_steps() != 3) return;
    snapshot_bytes_after_step_3 =
        trainer.backend()
            .allocator()
            .Usage(MemoryPool::kHost, MemoryComponent::kSnapshot)
            .current_bytes;
    held.Release();
  };
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<engine::Trainer>> trainer =
      engine::Trainer::Create(spec, options, &log);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok()) << log.str();
  ASSERT_GT(snapshot_bytes_after_step_3, 0) << "the write was not held";
  const int64_t measured =
      (*trainer)->backend().allocator().PoolUsage(MemoryPool::kHost).peak_bytes;

  const int64_t background = PredictedHostPeak(spec);
  const int64_t blocking = PredictedHostPeak(Spec(data, "blocking"));
  std::cout << "host peak: measured " << measured << ", background plan "
            << background << ", blocking plan " << blocking
            << "; snapshot held " << snapshot_bytes_after_step_3 << "\n";
  EXPECT_NEAR(static_cast<double>(background), static_cast<double>(measured),
              kBound * static_cast<double>(measured))
      << "host peak: background plan " << background << ", measured "
      << measured;
  EXPECT_GT(measured, blocking)
      << "the held snapshot should sit beside the step's host memory";
  EXPECT_GT(background, blocking);
}

}  // namespace
}  // namespace plateau
