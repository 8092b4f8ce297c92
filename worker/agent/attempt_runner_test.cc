#include "worker/agent/attempt_runner.h"

#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/agent/rank_status.h"

namespace plateau::worker {
namespace {

using testing::HasSubstr;

class AttemptRunnerTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* temporary = std::getenv("TEST_TMPDIR");
    directory_ = absl::StrCat(
        temporary != nullptr ? temporary : "/tmp", "/attempt-", getpid(), "-",
        testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(directory_);
  }

  // Ranks 2 and 3 of 4, each running `script` in sh.
  RankCommand Shell(const std::string& script) {
    RankCommand command;
    command.argv = {"/bin/sh", "-c", script};
    command.world_size = 4;
    command.first_rank = 2;
    command.local_ranks = 2;
    command.stop_grace_period = absl::Seconds(2);
    command.directory = directory_;
    return command;
  }

  std::unique_ptr<AttemptRunner> Start(RankCommand command) {
    v1::AttemptRef attempt;
    attempt.set_job_id("j-1");
    attempt.set_attempt(3);
    auto runner = AttemptRunner::Start(
        attempt, std::move(command), [this](int rank, const std::string& text) {
          absl::MutexLock lock(&mutex_);
          lines_.insert(absl::StrCat(rank, ":", text));
        });
    EXPECT_TRUE(runner.ok()) << runner.status();
    return *std::move(runner);
  }

  static void WaitUntilDone(const AttemptRunner& runner) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!runner.Done() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(runner.Done());
  }

  std::set<std::string> lines() {
    absl::MutexLock lock(&mutex_);
    return lines_;
  }

  std::string directory_;
  absl::Mutex mutex_;
  std::set<std::string> lines_ ABSL_GUARDED_BY(mutex_);
};

TEST_F(AttemptRunnerTest, RanksThatExitCleanlySucceed) {
  auto runner = Start(Shell(
      "echo hello from $PLATEAU_RANK of $PLATEAU_WORLD_SIZE; echo oops >&2"));
  WaitUntilDone(*runner);
  const v1::AttemptStatus outcome = runner->Outcome();
  EXPECT_EQ(outcome.phase(), v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_EQ(outcome.attempt().job_id(), "j-1");
  EXPECT_EQ(outcome.attempt().attempt(), 3);
  // Every line reached the sink before the runner said it was done.
  EXPECT_EQ(lines(), (std::set<std::string>{"2:hello from 2 of 4", "2:oops",
                                            "3:hello from 3 of 4", "3:oops"}));
  const absl::StatusOr<std::string> log =
      ReadFileToString(directory_ + "/ranks.log");
  ASSERT_TRUE(log.ok());
  EXPECT_THAT(*log, HasSubstr("[rank 3] hello from 3 of 4\n"));
}

TEST_F(AttemptRunnerTest, AFailedRankFailsTheAttemptNamingIt) {
  auto runner =
      Start(Shell("if [ $PLATEAU_RANK = 3 ]; then echo broken >&2; exit 7; fi; "
                  "exec sleep 30"));
  WaitUntilDone(*runner);
  const v1::AttemptStatus outcome = runner->Outcome();
  EXPECT_EQ(outcome.phase(), v1::ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(outcome.failed_rank(), 3);
  EXPECT_EQ(outcome.exit_code(), 7);
  EXPECT_THAT(outcome.error(), HasSubstr("rank 3 exited with code 7"));
  EXPECT_THAT(outcome.error(), HasSubstr("broken"));
}

TEST_F(AttemptRunnerTest, StopEndsRanksThatIgnoreSigtermAfterTheGrace) {
  auto runner = Start(Shell("trap '' TERM; echo ready; sleep 30 & wait"));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (lines().size() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Time stopped = absl::Now();
  runner->Stop();
  WaitUntilDone(*runner);
  EXPECT_GE(absl::Now() - stopped, absl::Seconds(2));
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(6));
  EXPECT_EQ(runner->Outcome().phase(), v1::ATTEMPT_PHASE_STOPPED);
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // no child left
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(AttemptRunnerTest, ACommandThatCannotRunFails) {
  RankCommand command = Shell("");
  command.argv = {"/nonexistent/plateau-worker"};
  auto runner = Start(std::move(command));
  WaitUntilDone(*runner);
  EXPECT_EQ(runner->Outcome().phase(), v1::ATTEMPT_PHASE_FAILED);
  EXPECT_THAT(runner->Outcome().error(), HasSubstr("cannot execute"));
}

TEST_F(AttemptRunnerTest, ReadsTheStatusOfEachRankThatWroteOne) {
  auto runner = Start(Shell("exec sleep 30"));
  EXPECT_TRUE(runner->RankStatuses().empty());
  v1::RankStatus status;
  status.set_rank(3);
  status.mutable_progress()->set_step(12);
  ASSERT_TRUE(WriteRankStatus(RankStatusPath(directory_, 3), status).ok());
  const std::vector<v1::RankStatus> statuses = runner->RankStatuses();
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0].rank(), 3);
  EXPECT_EQ(statuses[0].progress().step(), 12);
  runner->Stop();
  WaitUntilDone(*runner);
}

}  // namespace
}  // namespace plateau::worker
