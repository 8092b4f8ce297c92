#include "tests/daemon/daemon_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace plateau::testing {

DaemonProcess::DaemonProcess(const std::string& data_dir,
                             const std::vector<std::string>& flags) {
  std::vector<std::string> args = {
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                   std::getenv("TEST_WORKSPACE"), "/daemon/plateaud"),
      "--listen=127.0.0.1:0",
      "--metrics_listen=127.0.0.1:0",
      "--data_dir=" + data_dir,
      "--node_timeout=2s",
      "--heartbeat_interval=200ms"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int pipe_fds[2];
  EXPECT_EQ(pipe(pipe_fds), 0);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  output_ = fdopen(pipe_fds[0], "r");
  char line[512];
  if (fgets(line, sizeof(line), output_) != nullptr) {
    // "plateaud: gRPC on port N, ..."
    const std::string text(line);
    const size_t at = text.find("port ");
    if (at != std::string::npos) {
      absl::SimpleAtoi(text.substr(at + 5, text.find(',') - at - 5), &port_);
    }
  }
  EXPECT_GT(port_, 0) << "plateaud did not start";
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Kill(SIGTERM);
  if (output_ != nullptr) fclose(output_);
}

int DaemonProcess::Kill(int signal) {
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

bool DaemonProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    ADD_FAILURE() << "plateaud exited: "
                  << (WIFSIGNALED(status)
                          ? absl::StrCat("signal ", WTERMSIG(status))
                          : absl::StrCat("status ", WEXITSTATUS(status)));
    pid_ = -1;
    return false;
  }
  return true;
}

}  // namespace plateau::testing
