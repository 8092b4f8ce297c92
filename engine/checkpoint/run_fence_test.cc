#include "engine/checkpoint/run_fence.h"

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "engine/checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

namespace fs = std::filesystem;
using ::plateau::testing::ListTestDirectory;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;

// A one-tensor checkpoint of `step`.
absl::StatusOr<std::string> WriteStep(const std::string& run_dir, int64_t step,
                                      const RunFence* fence, int keep_last) {
  static const float weight[4] = {1, 2, 3, 4};
  CheckpointContents contents;
  contents.weights = {{"w", SafetensorsDtype::kF32, {4}, weight, 16}};
  contents.optimizer_state = {{"m", SafetensorsDtype::kF32, {4}, weight, 16}};
  contents.state_json = absl::StrCat(R"({"step": )", step, "}");
  return WriteCheckpoint(run_dir, step, contents,
                         {.keep_last = keep_last, .fence = fence});
}

TEST(RunFenceTest, ClaimWritesTheAttemptAndOnlyRaisesIt) {
  const std::string run_dir = MakeTestDirectory("fence") + "/runs/j-1";
  ASSERT_TRUE(RunFence::Claim(run_dir, 1).ok());  // creates the directory
  EXPECT_EQ(ReadTestFile(run_dir + "/FENCE"), "attempt 1\n");
  ASSERT_TRUE(RunFence::Claim(run_dir, 3).ok());
  EXPECT_EQ(ReadTestFile(run_dir + "/FENCE"), "attempt 3\n");
  // The same attempt again (a rank 0 that restarted its setup) is fine.
  ASSERT_TRUE(RunFence::Claim(run_dir, 3).ok());

  const absl::StatusOr<RunFence> stale = RunFence::Claim(run_dir, 2);
  ASSERT_TRUE(absl::IsFailedPrecondition(stale.status())) << stale.status();
  EXPECT_TRUE(absl::StrContains(stale.status().message(),
                                "claimed by attempt 3 of this job: attempt 2 "
                                "is stale"))
      << stale.status();
  EXPECT_EQ(ReadTestFile(run_dir + "/FENCE"), "attempt 3\n");

  // A run outside plateaud is kept out of a job's directory.
  const absl::StatusOr<RunFence> standalone = RunFence::Claim(run_dir, 0);
  ASSERT_TRUE(absl::IsFailedPrecondition(standalone.status()));
  EXPECT_TRUE(absl::StrContains(standalone.status().message(),
                                "must use another run directory"));
}

TEST(RunFenceTest, AStandaloneRunWritesNoFence) {
  const std::string run_dir = MakeTestDirectory("fence");
  absl::StatusOr<RunFence> fence = RunFence::Claim(run_dir, 0);
  ASSERT_TRUE(fence.ok()) << fence.status();
  EXPECT_FALSE(fs::exists(run_dir + "/FENCE"));
  ASSERT_TRUE(WriteStep(run_dir, 1, &*fence, 0).ok());
}

TEST(RunFenceTest, AReplacedAttemptCanNeitherCommitNorDelete) {
  const std::string run_dir = MakeTestDirectory("fence");
  absl::StatusOr<RunFence> old_attempt = RunFence::Claim(run_dir, 1);
  ASSERT_TRUE(old_attempt.ok()) << old_attempt.status();
  ASSERT_TRUE(WriteStep(run_dir, 10, &*old_attempt, 0).ok());
  ASSERT_TRUE(WriteStep(run_dir, 20, &*old_attempt, 0).ok());

  absl::StatusOr<RunFence> new_attempt = RunFence::Claim(run_dir, 2);
  ASSERT_TRUE(new_attempt.ok()) << new_attempt.status();
  const std::vector<std::string> before =
      ListTestDirectory(run_dir + "/checkpoints");

  // keep_last 1 would delete steps 10 and 20 if the commit went through.
  const absl::StatusOr<std::string> fenced =
      WriteStep(run_dir, 30, &*old_attempt, 1);
  ASSERT_TRUE(absl::IsFailedPrecondition(fenced.status())) << fenced.status();
  EXPECT_TRUE(absl::StrContains(fenced.status().message(),
                                "now belongs to attempt 2 of this job, so "
                                "attempt 1 may not change its checkpoints"))
      << fenced.status();
  // Nothing changed, and the fenced writer's staging directory is gone.
  EXPECT_EQ(ListTestDirectory(run_dir + "/checkpoints"), before);
  EXPECT_EQ(before,
            (std::vector<std::string>{"step-00000010", "step-00000020"}));
  const absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
      OpenLatestCheckpoint(run_dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ((*latest)->directory(), run_dir + "/checkpoints/step-00000020");

  // The owner commits and prunes as before.
  ASSERT_TRUE(WriteStep(run_dir, 30, &*new_attempt, 2).ok());
  EXPECT_EQ(ListTestDirectory(run_dir + "/checkpoints"),
            (std::vector<std::string>{"step-00000020", "step-00000030"}));
}

TEST(RunFenceTest, AClaimWaitsForACommitInProgressAndFencesWhatFollows) {
  const std::string run_dir = MakeTestDirectory("fence");
  absl::StatusOr<RunFence> old_attempt = RunFence::Claim(run_dir, 1);
  ASSERT_TRUE(old_attempt.ok());
  std::atomic<bool> in_commit{false};
  std::atomic<bool> claimed{false};
  bool claimed_during_commit = true;
  std::thread committer([&] {
    const absl::Status status = old_attempt->Guard([&] {
      in_commit = true;
      absl::SleepFor(absl::Milliseconds(300));
      claimed_during_commit = claimed.load();
      return absl::OkStatus();
    });
    EXPECT_TRUE(status.ok()) << status;
  });
  while (!in_commit) absl::SleepFor(absl::Milliseconds(1));
  absl::StatusOr<RunFence> new_attempt = RunFence::Claim(run_dir, 2);
  claimed = true;
  committer.join();
  ASSERT_TRUE(new_attempt.ok()) << new_attempt.status();
  EXPECT_FALSE(claimed_during_commit);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      old_attempt->Guard([] { return absl::OkStatus(); })));
}

TEST(RunFenceTest, ALockHeldTooLongIsAnErrorNotAHang) {
  const std::string run_dir = MakeTestDirectory("fence");
  absl::StatusOr<RunFence> holder = RunFence::Claim(run_dir, 1);
  ASSERT_TRUE(holder.ok());
  const absl::Status held = holder->Guard([&] {
    const absl::StatusOr<RunFence> waiting =
        RunFence::Claim(run_dir, 2, absl::Milliseconds(100));
    EXPECT_TRUE(absl::IsUnavailable(waiting.status())) << waiting.status();
    EXPECT_TRUE(absl::StrContains(waiting.status().message(),
                                  "stayed locked for 100ms"));
    return absl::OkStatus();
  });
  EXPECT_TRUE(held.ok()) << held;
}

TEST(RunFenceTest, ADamagedFenceIsDataLoss) {
  const std::string run_dir = MakeTestDirectory("fence");
  WriteTestFile(run_dir + "/FENCE", "attempt two\n");
  const absl::StatusOr<RunFence> fence = RunFence::Claim(run_dir, 3);
  ASSERT_TRUE(absl::IsDataLoss(fence.status())) << fence.status();
  EXPECT_TRUE(absl::StrContains(fence.status().message(), "FENCE"));
}

}  // namespace
}  // namespace plateau::engine
