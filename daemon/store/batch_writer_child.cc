#include "daemon/store/batch_writer_child.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace plateau::daemon {

BatchWriterChild::BatchWriterChild(std::vector<std::string> argv,
                                   const std::string& stderr_path) {
  std::vector<char*> arguments;
  for (std::string& argument : argv) arguments.push_back(argument.data());
  arguments.push_back(nullptr);
  const int stderr_fd =
      stderr_path.empty()
          ? -1
          : ::open(stderr_path.c_str(),
                   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int fds[2];
  if ((!stderr_path.empty() && stderr_fd < 0) || ::pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2 or " << stderr_path << ": " << std::strerror(errno);
    if (stderr_fd >= 0) ::close(stderr_fd);
    return;
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::dup2(fds[1], STDOUT_FILENO);
    if (stderr_fd >= 0) ::dup2(stderr_fd, STDERR_FILENO);
    const struct rlimit no_core = {0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::execv(arguments[0], arguments.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (stderr_fd >= 0) ::close(stderr_fd);
  acknowledgements_fd_ = fds[0];
  if (pid_ < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
}

BatchWriterChild::~BatchWriterChild() {
  if (pid_ > 0) KillAndWait();
  if (acknowledgements_fd_ >= 0) ::close(acknowledgements_fd_);
}

void BatchWriterChild::ReadAcknowledgements(size_t count) {
  while (acknowledged_.size() < count) {
    int64_t number;
    const ssize_t bytes = ::read(acknowledgements_fd_, &number, sizeof(number));
    if (bytes == sizeof(number)) {
      acknowledged_.push_back(number);
    } else if (bytes < 0 && errno == EINTR) {
      continue;
    } else {
      // A write of 8 bytes to a pipe is atomic: no partial reads.
      ASSERT_EQ(bytes, 0) << "read: " << std::strerror(errno);
      return;
    }
  }
}

int BatchWriterChild::KillAndWait(int signal) {
  ::kill(pid_, signal);
  const int wait_status = Reap();
  ReadAcknowledgements(SIZE_MAX);
  return wait_status;
}

int BatchWriterChild::Wait() {
  ReadAcknowledgements(SIZE_MAX);
  return Reap();
}

int BatchWriterChild::Reap() {
  int wait_status = 0;
  while (::waitpid(pid_, &wait_status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return wait_status;
}

std::string StoreTestBinaryPath(const std::string& name) {
  const char* runfiles = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (runfiles != nullptr && workspace != nullptr) {
    return absl::StrCat(runfiles, "/", workspace, "/daemon/store/", name);
  }
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name)
      .string();
}

}  // namespace plateau::daemon
