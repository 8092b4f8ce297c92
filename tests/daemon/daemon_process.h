// A plateaud process for tests that kill, restart or starve it: started on
// loopback with free ports (read from its first line of output) and the
// given --data_dir, stopped with SIGTERM when destroyed.
#ifndef PLATEAU_TESTS_DAEMON_DAEMON_PROCESS_H_
#define PLATEAU_TESTS_DAEMON_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <cstdio>
#include <string>
#include <vector>

namespace plateau::testing {

class DaemonProcess {
 public:
  // `flags` are added to plateaud's command line.
  explicit DaemonProcess(const std::string& data_dir,
                         const std::vector<std::string>& flags = {});
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Sends `signal` and waits for the process; returns its wait status.
  int Kill(int signal);
  // Whether the process is still running (it has not exited or been killed).
  bool Running();

  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  FILE* output_ = nullptr;
  int port_ = 0;
};

}  // namespace plateau::testing

#endif  // PLATEAU_TESTS_DAEMON_DAEMON_PROCESS_H_
