#include "worker/launch/rank_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

extern char** environ;

namespace plateau::worker {
namespace {

// How often the supervisor looks at exits, deadlines and the stop flag when
// no output arrives.
constexpr int kPollIntervalMs = 20;
// After the last rank exits, how long to wait for output still in the pipes
// (held open by a rank's leftover children until they are killed).
constexpr absl::Duration kDrainTime = absl::Milliseconds(500);
// A longer line is passed on in pieces.
constexpr size_t kMaxLineBytes = 64 * 1024;

void WriteAll(int fd, const std::string& text) {
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // The launcher's own output is gone; keep going.
    written += n;
  }
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// One rank's output stream (its stdout or stderr pipe), split into lines.
struct OutputPipe {
  int fd = -1;  // Read end; -1 once closed.
  std::string partial_line;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  OutputPipe out, err;
  std::deque<std::string> last_stderr_lines;
};

// The argv and environment of one rank, built before fork: the child may
// only call async-signal-safe functions.
struct ExecImage {
  std::vector<std::string> strings;  // argv, then environment entries.
  std::vector<char*> argv;
  std::vector<char*> envp;
};

ExecImage BuildExecImage(const LaunchOptions& options, int rank) {
  std::map<std::string, std::string> added = options.env;
  added["PLATEAU_RANK"] = absl::StrCat(rank);
  added["PLATEAU_LOCAL_RANK"] = absl::StrCat(rank - options.first_rank);
  added["PLATEAU_WORLD_SIZE"] = absl::StrCat(options.world_size);
  ExecImage image;
  image.strings = options.argv;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (added.count(text.substr(0, text.find('='))) == 0) {
      image.strings.push_back(text);
    }
  }
  for (const auto& [key, value] : added) {
    image.strings.push_back(absl::StrCat(key, "=", value));
  }
  const size_t argc = options.argv.size();
  for (size_t i = 0; i < image.strings.size(); ++i) {
    (i < argc ? image.argv : image.envp).push_back(image.strings[i].data());
  }
  image.argv.push_back(nullptr);
  image.envp.push_back(nullptr);
  return image;
}

// Writes "<prefix><errno>\n" to stderr with async-signal-safe calls only.
void ReportExecFailure(const std::string& prefix, int error) {
  char digits[16];
  int length = 0;
  do {
    digits[length++] = static_cast<char>('0' + error % 10);
    error /= 10;
  } while (error > 0 && length < 15);
  ssize_t ignored = write(STDERR_FILENO, prefix.data(), prefix.size());
  while (length > 0) ignored = write(STDERR_FILENO, &digits[--length], 1);
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
}

// In the forked child: become the rank, or _exit(127).
[[noreturn]] void ExecRank(const ExecImage& image, pid_t launcher_pid,
                           int null_fd, int out_fd, int err_fd,
                           const std::string& exec_error_prefix) {
  // Die with the launcher; it may already be gone.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher_pid) _exit(127);
  setpgid(0, 0);
  if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
      dup2(err_fd, STDERR_FILENO) < 0) {
    _exit(127);
  }
  // A rank starts with default signal handling whatever the launcher set.
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  signal(SIGPIPE, SIG_DFL);
  execvpe(image.argv[0], image.argv.data(), image.envp.data());
  ReportExecFailure(exec_error_prefix, errno);
  _exit(127);
}

std::string DescribeExit(int rank, int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int signal_number = WTERMSIG(wait_status);
    return absl::StrCat("rank ", rank, " was killed by signal ", signal_number,
                        " (", strsignal(signal_number), ")");
  }
  return absl::StrCat("rank ", rank, " exited with code ",
                      WEXITSTATUS(wait_status));
}

bool ExitedCleanly(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

// Owns the rank processes and their pipes. Whatever happens, the destructor
// leaves no child behind: it SIGKILLs and reaps every rank still unreaped.
class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options)
      : options_(options),
        ranks_(options.local_ranks > 0
                   ? options.local_ranks
                   : options.world_size - options.first_rank) {}
  ~Supervisor();

  absl::Status StartAll();
  absl::Status Run(const std::atomic<bool>* stop_requested,
                   RankFailure* first_failure);

 private:
  absl::Status StartRank(int rank);
  // The global rank of ranks_[index].
  int GlobalRank(int index) const { return options_.first_rank + index; }
  // Reads what the pipes hold, waiting up to timeout_ms for something.
  void PumpOutput(int timeout_ms);
  void ReadPipe(int rank, bool is_stderr);
  void EmitLine(int rank, bool is_stderr, std::string line);
  // Reaps exited ranks; returns the ranks that exited since the last call.
  std::vector<int> ReapExited();
  void SignalRunning(int signal_number);
  void KillProcessGroups();
  void DrainOutput();
  absl::Status Result(RankFailure* first_failure);

  const LaunchOptions& options_;
  std::vector<Rank> ranks_;
  int null_fd_ = -1;
  int first_failed_rank_ = -1;
};

Supervisor::~Supervisor() {
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    kill(-rank.pid, SIGKILL);
    kill(rank.pid, SIGKILL);
    while (waitpid(rank.pid, &rank.wait_status, 0) < 0 && errno == EINTR) {
    }
    rank.running = false;
  }
  KillProcessGroups();
  for (Rank& rank : ranks_) {
    CloseFd(&rank.out.fd);
    CloseFd(&rank.err.fd);
  }
  CloseFd(&null_fd_);
}

absl::Status Supervisor::StartAll() {
  null_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("open /dev/null: ", strerror(errno)));
  }
  for (int rank = 0; rank < static_cast<int>(ranks_.size()); ++rank) {
    if (absl::Status status = StartRank(rank); !status.ok()) {
      return absl::InternalError(absl::StrCat(
          "cannot start rank ", GlobalRank(rank), " of ", options_.world_size,
          ": ", status.message(), "; the ranks already started were stopped"));
    }
  }
  return absl::OkStatus();
}

absl::Status Supervisor::StartRank(int rank_index) {
  Rank& rank = ranks_[rank_index];
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  auto close_all = [&] {
    for (int* fd : {&out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1]}) {
      CloseFd(fd);
    }
  };
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int error = errno;
    close_all();
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(error)));
  }
  const ExecImage image = BuildExecImage(options_, GlobalRank(rank_index));
  const std::string exec_error_prefix =
      absl::StrCat("cannot execute ", options_.argv[0], ": errno ");
  const pid_t launcher_pid = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close_all();
    return absl::InternalError(absl::StrCat("fork: ", strerror(error)));
  }
  if (pid == 0) {
    ExecRank(image, launcher_pid, null_fd_, out_pipe[1], err_pipe[1],
             exec_error_prefix);
  }
  setpgid(pid, pid);  // Also done by the child; whichever runs first wins.
  rank.pid = pid;
  rank.running = true;
  CloseFd(&out_pipe[1]);
  CloseFd(&err_pipe[1]);
  rank.out.fd = out_pipe[0];
  rank.err.fd = err_pipe[0];
  fcntl(rank.out.fd, F_SETFL, O_NONBLOCK);
  fcntl(rank.err.fd, F_SETFL, O_NONBLOCK);
  return absl::OkStatus();
}

void Supervisor::EmitLine(int rank_index, bool is_stderr, std::string line) {
  Rank& rank = ranks_[rank_index];
  WriteAll(is_stderr ? options_.stderr_fd : options_.stdout_fd,
           absl::StrCat("[rank ", GlobalRank(rank_index), "] ", line, "\n"));
  if (!is_stderr) return;
  rank.last_stderr_lines.push_back(std::move(line));
  if (rank.last_stderr_lines.size() > kStderrLinesKept) {
    rank.last_stderr_lines.pop_front();
  }
}

void Supervisor::ReadPipe(int rank_index, bool is_stderr) {
  OutputPipe& pipe =
      is_stderr ? ranks_[rank_index].err : ranks_[rank_index].out;
  char buffer[16384];
  while (pipe.fd >= 0) {
    const ssize_t n = read(pipe.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      // End of output (or a broken pipe): pass on the unterminated rest. The
      // rank itself is still watched through waitpid.
      if (!pipe.partial_line.empty()) {
        EmitLine(rank_index, is_stderr, std::move(pipe.partial_line));
        pipe.partial_line.clear();
      }
      CloseFd(&pipe.fd);
      return;
    }
    pipe.partial_line.append(buffer, n);
    size_t newline;
    while ((newline = pipe.partial_line.find('\n')) != std::string::npos) {
      EmitLine(rank_index, is_stderr, pipe.partial_line.substr(0, newline));
      pipe.partial_line.erase(0, newline + 1);
    }
    if (pipe.partial_line.size() > kMaxLineBytes) {
      EmitLine(rank_index, is_stderr, std::move(pipe.partial_line));
      pipe.partial_line.clear();
    }
  }
}

void Supervisor::PumpOutput(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<int, bool>> owners;  // (rank, is_stderr) per fd.
  for (int rank = 0; rank < static_cast<int>(ranks_.size()); ++rank) {
    for (const bool is_stderr : {false, true}) {
      const int fd = is_stderr ? ranks_[rank].err.fd : ranks_[rank].out.fd;
      if (fd < 0) continue;
      fds.push_back(pollfd{fd, POLLIN, 0});
      owners.emplace_back(rank, is_stderr);
    }
  }
  const int ready = poll(fds.data(), fds.size(), timeout_ms);
  if (ready < 0 && errno != EINTR) {
    // Retried on the next call; meanwhile exits are still reaped.
    absl::SleepFor(absl::Milliseconds(timeout_ms));
  }
  if (ready <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) ReadPipe(owners[i].first, owners[i].second);
  }
}

std::vector<int> Supervisor::ReapExited() {
  std::vector<int> exited;
  for (int index = 0; index < static_cast<int>(ranks_.size()); ++index) {
    Rank& rank = ranks_[index];
    if (!rank.running) continue;
    const pid_t reaped = waitpid(rank.pid, &rank.wait_status, WNOHANG);
    if (reaped == 0 || (reaped < 0 && errno == EINTR)) continue;
    if (reaped < 0) {
      // Someone else reaped it (ECHILD): its exit status is lost.
      rank.wait_status = 0xff00;  // As if it exited with code 255.
    }
    rank.running = false;
    exited.push_back(index);
  }
  return exited;
}

void Supervisor::SignalRunning(int signal_number) {
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    // The whole process group; the rank alone if it has none yet.
    if (kill(-rank.pid, signal_number) != 0) kill(rank.pid, signal_number);
  }
}

void Supervisor::KillProcessGroups() {
  // A reaped rank's pid stays reserved while its process group has members,
  // so this cannot hit an unrelated process.
  for (const Rank& rank : ranks_) {
    if (rank.pid > 0) kill(-rank.pid, SIGKILL);
  }
}

void Supervisor::DrainOutput() {
  const absl::Time deadline = absl::Now() + kDrainTime;
  while (absl::Now() < deadline) {
    bool open = false;
    for (const Rank& rank : ranks_)
      open |= rank.out.fd >= 0 || rank.err.fd >= 0;
    if (!open) return;
    PumpOutput(kPollIntervalMs);
  }
}

absl::Status Supervisor::Run(const std::atomic<bool>* stop_requested,
                             RankFailure* first_failure) {
  bool stopping = false;
  bool stop_was_requested = false;
  absl::Time kill_deadline = absl::InfiniteFuture();
  auto begin_stop = [&] {
    if (!stopping) kill_deadline = absl::Now() + options_.stop_grace_period;
    stopping = true;
    SignalRunning(SIGTERM);
  };
  int running = static_cast<int>(ranks_.size());
  while (running > 0) {
    PumpOutput(kPollIntervalMs);
    for (const int rank : ReapExited()) {
      --running;
      // Ranks ending after a stop began were (probably) ended by it.
      if (!stopping && first_failed_rank_ < 0 &&
          !ExitedCleanly(ranks_[rank].wait_status)) {
        first_failed_rank_ = rank;
      }
    }
    if (first_failed_rank_ >= 0 && !stopping) begin_stop();
    if (stop_requested != nullptr && stop_requested->load() &&
        !stop_was_requested) {
      stop_was_requested = true;
      begin_stop();
    }
    if (absl::Now() >= kill_deadline) SignalRunning(SIGKILL);
  }
  KillProcessGroups();
  DrainOutput();
  return Result(first_failure);
}

absl::Status Supervisor::Result(RankFailure* first_failure) {
  if (first_failed_rank_ >= 0) {
    const Rank& rank = ranks_[first_failed_rank_];
    RankFailure failure;
    failure.rank = GlobalRank(first_failed_rank_);
    if (WIFSIGNALED(rank.wait_status)) {
      failure.signal = WTERMSIG(rank.wait_status);
    } else {
      failure.exit_code = WEXITSTATUS(rank.wait_status);
    }
    for (const std::string& line : rank.last_stderr_lines) {
      absl::StrAppend(&failure.last_stderr_lines, line, "\n");
    }
    if (first_failure != nullptr) *first_failure = failure;
    return absl::AbortedError(DescribeRankFailure(failure));
  }
  std::vector<std::string> unclean;
  for (int index = 0; index < static_cast<int>(ranks_.size()); ++index) {
    if (!ExitedCleanly(ranks_[index].wait_status)) {
      unclean.push_back(
          DescribeExit(GlobalRank(index), ranks_[index].wait_status));
    }
  }
  // Without a failure of its own, only a requested stop ends a rank unclean.
  if (unclean.empty()) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat("stopped on request: ", absl::StrJoin(unclean, "; ")));
}

}  // namespace

std::string DescribeRankFailure(const RankFailure& failure) {
  std::string text =
      failure.signal != 0
          ? absl::StrCat("rank ", failure.rank, " was killed by signal ",
                         failure.signal, " (", strsignal(failure.signal), ")")
          : absl::StrCat("rank ", failure.rank, " exited with code ",
                         failure.exit_code);
  absl::StrAppend(&text, "; the other ranks were stopped");
  if (!failure.last_stderr_lines.empty()) {
    absl::StrAppend(&text, "; its last stderr lines:\n",
                    failure.last_stderr_lines);
  }
  return text;
}

absl::Status LaunchRanks(const LaunchOptions& options,
                         const std::atomic<bool>* stop_requested,
                         RankFailure* first_failure) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("no command to run");
  }
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", options.world_size, " is under 1"));
  }
  if (options.first_rank < 0 || options.local_ranks < 0 ||
      options.first_rank + std::max(options.local_ranks, 1) >
          options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks ", options.first_rank, " + ", options.local_ranks,
                     " do not fit a world of ", options.world_size));
  }
  if (options.stop_grace_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("negative stop grace period");
  }
  if (stop_requested != nullptr && stop_requested->load()) {
    return absl::CancelledError("stop requested before the ranks started");
  }
  Supervisor supervisor(options);
  RETURN_IF_ERROR(supervisor.StartAll());
  return supervisor.Run(stop_requested, first_failure);
}

}  // namespace plateau::worker
