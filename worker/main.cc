// plateau-worker: the per-node agent and the training engine's entry points.
//   plateau-worker --coordinator HOST:PORT [flags]
//                                         the node's agent (worker/agent)
//   plateau-worker train SPEC [--world N] [flags]
//                                         standalone training on N local ranks
//   plateau-worker eval SPEC --weights W --tokens T
//   plateau-worker export SPEC --weights W --output DIR [--format hf]
//   plateau-worker data prepare ...       runs plateau-data (beside this
//                                         binary) with the same arguments
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/mutex_settings.h"
#include "worker/cli/commands.h"
#include "worker/cli/data_tool.h"
#include "worker/cli/flags.h"

namespace {

// Replaces this process with plateau-data from this binary's directory.
int ExecDataTool(int argc, char** argv) {
  absl::StatusOr<std::string> path = plateau::worker::DataToolPath();
  if (!path.ok()) {
    std::cerr << "plateau-worker: " << path.status().message() << "\n";
    return 1;
  }
  std::string tool = *path;
  std::vector<char*> arguments = {tool.data()};
  for (int i = 2; i < argc; ++i) arguments.push_back(argv[i]);
  arguments.push_back(nullptr);
  execv(tool.c_str(), arguments.data());
  std::cerr << "plateau-worker: cannot run " << tool << ": "
            << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "data") {
    return ExecDataTool(argc, argv);
  }
  absl::SetProgramUsageMessage(
      "plateau-worker --coordinator HOST:PORT [flags] | train SPEC | eval "
      "SPEC | export SPEC | checkpoint verify|consolidate DIR | data prepare  "
      "[flags]");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  plateau::DisableMutexDeadlockDetection();
  if (positional.size() < 2 && !absl::GetFlag(FLAGS_coordinator).empty()) {
    return plateau::worker::RunAgentCommand();
  }
  if (positional.size() < 2) {
    std::cerr
        << "usage: plateau-worker --coordinator HOST:PORT | train SPEC "
           "| eval SPEC | export SPEC | checkpoint verify|consolidate DIR | "
           "data prepare (--help for flags)\n";
    return 2;
  }
  const std::string command = positional[1];
  const std::vector<std::string> arguments(positional.begin() + 2,
                                           positional.end());
  if (command == "train") {
    return plateau::worker::RunTrainCommand(
        arguments, std::vector<std::string>(argv, argv + argc));
  }
  if (command == "eval") return plateau::worker::RunEvalCommand(arguments);
  if (command == "export") return plateau::worker::RunExportCommand(arguments);
  if (command == "checkpoint") {
    return plateau::worker::RunCheckpointCommand(arguments);
  }
  std::cerr << "plateau-worker: unknown command '" << command
            << "' (expected train, eval, export, checkpoint or data)\n";
  return 2;
}
