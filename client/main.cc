// plateau: the command-line client of plateaud (docs/ARCHITECTURE.md section
// 6). See cli.h; `plateau --help` prints the usage.
#include <string>
#include <vector>

#include "client/cli.h"
#include "common/mutex_settings.h"

int main(int argc, char** argv) {
  plateau::DisableMutexDeadlockDetection();
  return plateau::client::RunCli(
      std::vector<std::string>(argv + 1, argv + argc));
}
