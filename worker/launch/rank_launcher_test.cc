#include "worker/launch/rank_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::worker {
namespace {

using testing::HasSubstr;
using testing::Not;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, "-", getpid());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Captures the launcher's prefixed output in two files.
class CapturedOutput {
 public:
  CapturedOutput()
      : out_path_(TempPath("stdout")), err_path_(TempPath("stderr")) {
    out_fd_ = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    err_fd_ = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  ~CapturedOutput() {
    close(out_fd_);
    close(err_fd_);
  }
  void AttachTo(LaunchOptions& options) const {
    options.stdout_fd = out_fd_;
    options.stderr_fd = err_fd_;
  }
  std::string out() const { return ReadFile(out_path_); }
  std::string err() const { return ReadFile(err_path_); }

 private:
  std::string out_path_, err_path_;
  int out_fd_ = -1, err_fd_ = -1;
};

LaunchOptions ShellRanks(int world_size, const std::string& script) {
  LaunchOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.world_size = world_size;
  options.stop_grace_period = absl::Seconds(5);
  return options;
}

// After every launch, the test process has no child left.
void ExpectNoChildren() {
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(RankLauncherTest, AllRanksSucceedWithPrefixedOutput) {
  LaunchOptions options =
      ShellRanks(3,
                 "echo out $PLATEAU_RANK/$PLATEAU_WORLD_SIZE $GREETING; "
                 "echo err $PLATEAU_RANK >&2; printf 'no newline'");
  options.env["GREETING"] = "hello";
  CapturedOutput output;
  output.AttachTo(options);
  ASSERT_TRUE(LaunchRanks(options, nullptr).ok());
  const std::vector<std::string> out_lines =
      absl::StrSplit(output.out(), '\n', absl::SkipEmpty());
  const std::set<std::string> out(out_lines.begin(), out_lines.end());
  EXPECT_EQ(out, (std::set<std::string>{
                     "[rank 0] out 0/3 hello", "[rank 1] out 1/3 hello",
                     "[rank 2] out 2/3 hello", "[rank 0] no newline",
                     "[rank 1] no newline", "[rank 2] no newline"}));
  EXPECT_EQ(out_lines.size(), 6u);
  const std::string err = output.err();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(err,
                HasSubstr(absl::StrCat("[rank ", rank, "] err ", rank, "\n")));
  }
  ExpectNoChildren();
}

// A node's share of a larger world: ranks 2 and 3 of 5, numbered globally
// in the environment, the prefixes and the failure report, and locally (0
// and 1) in PLATEAU_LOCAL_RANK.
TEST(RankLauncherTest, RunsANodesShareWithGlobalRanks) {
  LaunchOptions options =
      ShellRanks(5,
                 "echo out $PLATEAU_RANK/$PLATEAU_WORLD_SIZE "
                 "local $PLATEAU_LOCAL_RANK; "
                 "if [ $PLATEAU_RANK = 3 ]; then exit 4; fi");
  options.first_rank = 2;
  options.local_ranks = 2;
  CapturedOutput output;
  output.AttachTo(options);
  RankFailure failure;
  const absl::Status status = LaunchRanks(options, nullptr, &failure);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("rank 3 exited with code 4"));
  EXPECT_EQ(failure.rank, 3);
  const std::vector<std::string> out_lines =
      absl::StrSplit(output.out(), '\n', absl::SkipEmpty());
  EXPECT_EQ(std::set<std::string>(out_lines.begin(), out_lines.end()),
            (std::set<std::string>{"[rank 2] out 2/5 local 0",
                                   "[rank 3] out 3/5 local 1"}));
  ExpectNoChildren();
}

TEST(RankLauncherTest, FastFailureStopsTheOthersAndIsNamed) {
  LaunchOptions options =
      ShellRanks(3,
                 "if [ $PLATEAU_RANK = 1 ]; then echo boom >&2; exit 3; fi; "
                 "exec sleep 30");
  CapturedOutput output;
  output.AttachTo(options);
  RankFailure failure;
  const absl::Time start = absl::Now();
  const absl::Status status = LaunchRanks(options, nullptr, &failure);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("rank 1 exited with code 3"));
  EXPECT_THAT(status.message(), HasSubstr("boom"));
  EXPECT_EQ(failure.rank, 1);
  EXPECT_EQ(failure.exit_code, 3);
  EXPECT_EQ(failure.signal, 0);
  EXPECT_EQ(failure.last_stderr_lines, "boom\n");
  ExpectNoChildren();
}

// Rank 0 ignores SIGTERM and hangs; rank 1 fails: rank 0 is SIGKILLed once
// the grace period is over.
TEST(RankLauncherTest, HangingRankIsKilledAfterTheGracePeriod) {
  LaunchOptions options =
      ShellRanks(2,
                 "if [ $PLATEAU_RANK = 1 ]; then sleep 0.2; exit 2; fi; "
                 "trap '' TERM; exec sleep 30");
  options.stop_grace_period = absl::Milliseconds(700);
  const absl::Time start = absl::Now();
  const absl::Status status = LaunchRanks(options, nullptr);
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, absl::Milliseconds(850));
  EXPECT_LT(elapsed, absl::Seconds(4));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("rank 1 exited with code 2"));
  ExpectNoChildren();
}

TEST(RankLauncherTest, RankKilledBySignal) {
  LaunchOptions options = ShellRanks(
      2,
      "if [ $PLATEAU_RANK = 0 ]; then echo dying >&2; kill -9 $$; fi; "
      "exec sleep 30");
  RankFailure failure;
  const absl::Status status = LaunchRanks(options, nullptr, &failure);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("rank 0 was killed by signal 9"));
  EXPECT_THAT(status.message(), HasSubstr("dying"));
  EXPECT_EQ(failure.signal, SIGKILL);
  ExpectNoChildren();
}

TEST(RankLauncherTest, StopRequestStopsEveryRank) {
  LaunchOptions options = ShellRanks(3, "exec sleep 30");
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stop = true;
  });
  const absl::Time start = absl::Now();
  const absl::Status status = LaunchRanks(options, &stop);
  stopper.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("signal 15"));
  ExpectNoChildren();
}

// Ranks that finish cleanly on SIGTERM (as the trainer does) make a
// requested stop OK.
TEST(RankLauncherTest, GracefulStopIsOk) {
  LaunchOptions options = ShellRanks(
      2, "trap 'echo stopping; exit 0' TERM; while true; do sleep 0.05; done");
  CapturedOutput output;
  output.AttachTo(options);
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stop = true;
  });
  const absl::Status status = LaunchRanks(options, &stop);
  stopper.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_THAT(output.out(), HasSubstr("[rank 0] stopping"));
  EXPECT_THAT(output.out(), HasSubstr("[rank 1] stopping"));
  ExpectNoChildren();
}

TEST(RankLauncherTest, KeepsOnlyTheLastStderrLines) {
  LaunchOptions options = ShellRanks(
      1,
      "i=1; while [ $i -le 30 ]; do echo line$i >&2; i=$((i+1)); done; "
      "exit 1");
  CapturedOutput output;
  output.AttachTo(options);
  RankFailure failure;
  EXPECT_FALSE(LaunchRanks(options, nullptr, &failure).ok());
  EXPECT_THAT(failure.last_stderr_lines, HasSubstr("line11\n"));
  EXPECT_THAT(failure.last_stderr_lines, HasSubstr("line30\n"));
  EXPECT_THAT(failure.last_stderr_lines, Not(HasSubstr("line10\n")));
  // Every line still reached the launcher's stderr.
  EXPECT_THAT(output.err(), HasSubstr("[rank 0] line1\n"));
}

TEST(RankLauncherTest, CommandThatCannotRunFailsItsRank) {
  LaunchOptions options;
  options.argv = {"/nonexistent/plateau-rank"};
  options.world_size = 2;
  CapturedOutput output;
  output.AttachTo(options);
  RankFailure failure;
  const absl::Status status = LaunchRanks(options, nullptr, &failure);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(failure.exit_code, 127);
  EXPECT_THAT(failure.last_stderr_lines,
              HasSubstr("cannot execute /nonexistent/plateau-rank"));
  ExpectNoChildren();
}

TEST(RankLauncherTest, RejectsBadOptions) {
  LaunchOptions options;
  EXPECT_EQ(LaunchRanks(options, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  options = ShellRanks(0, "true");
  EXPECT_EQ(LaunchRanks(options, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  options = ShellRanks(2, "true");
  options.first_rank = 1;
  options.local_ranks = 2;  // ranks 1 and 2 of a world of 2
  EXPECT_EQ(LaunchRanks(options, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  options = ShellRanks(1, "true");
  std::atomic<bool> stop{true};
  EXPECT_EQ(LaunchRanks(options, &stop).code(), absl::StatusCode::kCancelled);
}

// The launcher runs out of file descriptors while starting rank 1: the rank
// already started is stopped and reaped before the error comes back.
TEST(RankLauncherTest, FailureToStartReapsTheStartedRanks) {
  rlimit original;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  // The five lowest free descriptors: /dev/null and rank 0's two pipes fit,
  // rank 1's second pipe does not.
  std::vector<int> free_fds;
  for (int fd = 0; free_fds.size() < 5; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) free_fds.push_back(fd);
  }
  rlimit limited = original;
  limited.rlim_cur = free_fds.back() + 1;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limited), 0);
  LaunchOptions options = ShellRanks(3, "exec sleep 30");
  const absl::Time start = absl::Now();
  const absl::Status status = LaunchRanks(options, nullptr);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("cannot start rank 1"));
  ExpectNoChildren();
}

bool ProcessIsGone(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (stat.empty()) return true;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

// Killing the launcher with SIGKILL (no cleanup of its own) still ends its
// ranks: they die with it.
TEST(RankLauncherTest, RanksDieWithTheLauncher) {
  const std::string pid_file = TempPath("rank-pid");
  unlink(pid_file.c_str());
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchOptions options =
        ShellRanks(1, absl::StrCat("echo $$ > ", pid_file, "; exec sleep 30"));
    LaunchRanks(options, nullptr).IgnoreError();
    _exit(0);
  }
  std::string rank_pid_text;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (rank_pid_text.find('\n') == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    rank_pid_text = ReadFile(pid_file);
  }
  const pid_t rank_pid = std::atoi(rank_pid_text.c_str());
  ASSERT_GT(rank_pid, 0);
  ASSERT_FALSE(ProcessIsGone(rank_pid));
  kill(launcher, SIGKILL);
  ASSERT_EQ(waitpid(launcher, nullptr, 0), launcher);
  while (!ProcessIsGone(rank_pid) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(ProcessIsGone(rank_pid));
}

}  // namespace
}  // namespace plateau::worker
