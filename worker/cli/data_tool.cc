#include "worker/cli/data_tool.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace plateau::worker {

absl::StatusOr<std::string> DataToolPath() {
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    return absl::InternalError(
        absl::StrCat("cannot find my own path: ", std::strerror(errno)));
  }
  const std::string binary(self, length);
  return binary.substr(0, binary.rfind('/') + 1) + "plateau-data";
}

absl::StatusOr<std::string> RunDataTool(
    const std::vector<std::string>& arguments) {
  absl::StatusOr<std::string> tool = DataToolPath();
  if (!tool.ok()) return tool.status();
  std::vector<std::string> argv_strings = {*tool};
  argv_strings.insert(argv_strings.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& argument : argv_strings) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const std::string command = absl::StrJoin(argv_strings, " ");

  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot run ", command, ": ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[1]);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, tool->c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_ends[1]);
  if (spawned != 0) {
    close(pipe_ends[0]);
    return absl::InternalError(
        absl::StrCat("cannot run ", command, ": ", std::strerror(spawned)));
  }
  std::string output;
  char buffer[4096];
  for (;;) {
    const ssize_t read_bytes = read(pipe_ends[0], buffer, sizeof(buffer));
    if (read_bytes > 0) {
      output.append(buffer, read_bytes);
    } else if (read_bytes == 0 || errno != EINTR) {
      break;
    }
  }
  close(pipe_ends[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        command, " failed (",
        WIFEXITED(status) ? absl::StrCat("exit status ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        ")"));
  }
  return output;
}

}  // namespace plateau::worker
