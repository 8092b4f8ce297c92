#include "engine/checkpoint/run_fence.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace plateau::engine {
namespace {

constexpr absl::string_view kFencePrefix = "attempt ";

std::string FencePath(const std::string& run_dir) {
  return absl::StrCat(run_dir, "/", kFenceFileName);
}

// FENCE.lock, locked for writing; unlocked (closed) on destruction.
class FenceLock {
 public:
  static absl::StatusOr<FenceLock> Acquire(const std::string& run_dir,
                                           absl::Duration timeout) {
    const std::string path = absl::StrCat(run_dir, "/", kFenceLockFileName);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
    }
    FenceLock lock(fd);
    struct flock whole = {};
    whole.l_type = F_WRLCK;
    whole.l_whence = SEEK_SET;
    const absl::Time deadline = absl::Now() + timeout;
    while (::fcntl(fd, F_OFD_SETLK, &whole) != 0) {
      if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
        return absl::ErrnoToStatus(errno, absl::StrCat("cannot lock ", path));
      }
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat(
            path, " stayed locked for ", absl::FormatDuration(timeout),
            ": another writer of this run directory is stuck mid-commit"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return lock;
  }

  FenceLock(FenceLock&& other) : fd_(std::exchange(other.fd_, -1)) {}
  FenceLock& operator=(FenceLock&&) = delete;
  ~FenceLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  explicit FenceLock(int fd) : fd_(fd) {}
  int fd_;
};

// The attempt FENCE names; 0 when there is none.
absl::StatusOr<int64_t> ReadFence(const std::string& run_dir) {
  const std::string path = FencePath(run_dir);
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) return 0;
  if (!text.ok()) return text.status();
  absl::string_view body = absl::StripTrailingAsciiWhitespace(*text);
  int64_t attempt = 0;
  if (!absl::ConsumePrefix(&body, kFencePrefix) ||
      !absl::SimpleAtoi(body, &attempt) || attempt < 1) {
    return absl::DataLossError(absl::StrCat(
        path, " does not hold \"attempt N\" with N >= 1: it is damaged"));
  }
  return attempt;
}

}  // namespace

absl::StatusOr<RunFence> RunFence::Claim(const std::string& run_dir,
                                         int64_t attempt,
                                         absl::Duration lock_timeout) {
  const std::string directory = TrimTrailingSlashes(run_dir);
  if (attempt < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot claim ", directory, " for attempt ", attempt));
  }
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat("cannot create ", directory));
  }
  ASSIGN_OR_RETURN(FenceLock lock, FenceLock::Acquire(directory, lock_timeout));
  ASSIGN_OR_RETURN(const int64_t owner, ReadFence(directory));
  if (owner > attempt) {
    return absl::FailedPreconditionError(
        attempt == 0
            ? absl::StrCat(directory, " belongs to attempt ", owner,
                           " of a plateaud job; a run outside plateaud must "
                           "use another run directory (or a copy of it)")
            : absl::StrCat(directory, " was claimed by attempt ", owner,
                           " of this job: attempt ", attempt,
                           " is stale and must not write there"));
  }
  if (attempt > owner) {
    RETURN_IF_ERROR(WriteFileAtomically(
        FencePath(directory), {absl::StrCat(kFencePrefix, attempt, "\n")}));
  }
  return RunFence(directory, attempt, lock_timeout);
}

absl::Status RunFence::Guard(
    const std::function<absl::Status()>& change) const {
  ASSIGN_OR_RETURN(FenceLock lock, FenceLock::Acquire(run_dir_, lock_timeout_));
  ASSIGN_OR_RETURN(const int64_t owner, ReadFence(run_dir_));
  if (owner != attempt_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fenced: ", run_dir_, " now belongs to attempt ", owner,
        " of this job, so attempt ", attempt_,
        " may not change its checkpoints (it was replaced, most likely after "
        "plateaud lost touch with its node)"));
  }
  return change();
}

}  // namespace plateau::engine
