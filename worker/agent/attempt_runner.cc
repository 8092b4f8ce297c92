#include "worker/agent/attempt_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/agent/rank_status.h"
#include "worker/launch/rank_launcher.h"

namespace plateau::worker {
namespace {

// "[rank 3] text" (rank_launcher.h's prefix) -> 3 and "text"; -1 and the
// whole line when it has no prefix.
std::pair<int, std::string> SplitRankPrefix(absl::string_view line) {
  constexpr absl::string_view kPrefix = "[rank ";
  int rank = -1;
  const size_t close = line.find("] ");
  if (line.substr(0, kPrefix.size()) == kPrefix &&
      close != absl::string_view::npos &&
      absl::SimpleAtoi(line.substr(kPrefix.size(), close - kPrefix.size()),
                       &rank)) {
    return {rank, std::string(line.substr(close + 2))};
  }
  return {-1, std::string(line)};
}

}  // namespace

AttemptRunner::AttemptRunner(const v1::AttemptRef& attempt, RankCommand command,
                             RankLineSink sink)
    : attempt_(attempt), command_(std::move(command)), sink_(std::move(sink)) {
  *outcome_.mutable_attempt() = attempt_;
}

absl::StatusOr<std::unique_ptr<AttemptRunner>> AttemptRunner::Start(
    const v1::AttemptRef& attempt, RankCommand command, RankLineSink sink) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  std::unique_ptr<AttemptRunner> runner(
      new AttemptRunner(attempt, std::move(command), std::move(sink)));
  AttemptRunner* self = runner.get();
  runner->reader_ = std::thread([self, fd = fds[0]] { self->ReadLines(fd); });
  runner->launcher_ = std::thread([self, fd = fds[1]] { self->Run(fd); });
  return runner;
}

AttemptRunner::~AttemptRunner() {
  Stop();
  if (launcher_.joinable()) launcher_.join();
  if (reader_.joinable()) reader_.join();
}

void AttemptRunner::Stop() { stop_requested_.store(true); }

bool AttemptRunner::Done() const {
  absl::MutexLock lock(&mutex_);
  return done_;
}

v1::AttemptStatus AttemptRunner::Outcome() const {
  absl::MutexLock lock(&mutex_);
  return outcome_;
}

std::vector<v1::RankStatus> AttemptRunner::RankStatuses() const {
  std::vector<v1::RankStatus> statuses;
  for (int i = 0; i < command_.local_ranks; ++i) {
    absl::StatusOr<v1::RankStatus> status = ReadRankStatus(
        RankStatusPath(command_.directory, command_.first_rank + i));
    if (status.ok()) statuses.push_back(*std::move(status));
  }
  return statuses;
}

void AttemptRunner::Run(int output_fd) {
  LaunchOptions options;
  options.argv = command_.argv;
  options.env = command_.env;
  options.world_size = command_.world_size;
  options.first_rank = command_.first_rank;
  options.local_ranks = command_.local_ranks;
  options.stop_grace_period = command_.stop_grace_period;
  options.stdout_fd = output_fd;
  options.stderr_fd = output_fd;
  RankFailure failure;
  const absl::Status status = LaunchRanks(options, &stop_requested_, &failure);
  close(output_fd);  // the reader sees the end once the ranks' lines are in
  if (reader_.joinable()) reader_.join();
  absl::MutexLock lock(&mutex_);
  if (stop_requested_.load()) {
    outcome_.set_phase(v1::ATTEMPT_PHASE_STOPPED);
  } else if (status.ok()) {
    outcome_.set_phase(v1::ATTEMPT_PHASE_SUCCEEDED);
  } else {
    outcome_.set_phase(v1::ATTEMPT_PHASE_FAILED);
    outcome_.set_failed_rank(failure.rank >= 0 ? failure.rank
                                               : command_.first_rank);
    outcome_.set_exit_code(failure.signal != 0 ? 128 + failure.signal
                                               : failure.exit_code);
    outcome_.set_error(std::string(status.message()));
  }
  done_ = true;
}

void AttemptRunner::ReadLines(int input_fd) {
  std::ofstream log(absl::StrCat(command_.directory, "/ranks.log"),
                    std::ios::app);
  std::string pending;
  char buffer[16384];
  while (true) {
    const ssize_t n = read(input_fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      log << line << "\n";
      const auto [rank, text] = SplitRankPrefix(line);
      sink_(rank, text);
    }
  }
  if (!pending.empty()) {
    log << pending << "\n";
    const auto [rank, text] = SplitRankPrefix(pending);
    sink_(rank, text);
  }
  log.flush();
  close(input_fd);
}

}  // namespace plateau::worker
