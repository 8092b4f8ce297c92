// The subcommands of plateau-worker, and its agent mode. Each
// takes its positional arguments (after the subcommand name) and reads its
// options from the flags in flags.h; each returns the process exit status:
// 0 success, 1 failure (printed to stderr), 2 usage error.
#ifndef PLATEAU_WORKER_CLI_COMMANDS_H_
#define PLATEAU_WORKER_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace plateau::worker {

// train SPEC [--world N]: training (see engine/train/trainer.h); with
// N > 1 it launches N local ranks, each running `command_line` (this
// process's argv) again. A process started that way trains as its rank.
int RunTrainCommand(const std::vector<std::string>& arguments,
                    const std::vector<std::string>& command_line);

// --coordinator ADDRESS: the node's agent (worker/agent/agent.h) until
// SIGINT or SIGTERM; serves /metrics on --metrics_listen.
int RunAgentCommand();

// eval SPEC --weights PATH --tokens FILE: mean cross-entropy and perplexity.
int RunEvalCommand(const std::vector<std::string>& arguments);

// export SPEC --weights PATH --output DIR: the weights (a checkpoint or a
// safetensors file of the spec's model) in the Hugging Face layout
// (engine/train/hf_export.h).
int RunExportCommand(const std::vector<std::string>& arguments);

// checkpoint verify DIR: reads every stored byte of a checkpoint and checks
// it against its checksums (version 2: every block's CRC-32; version 1:
// every file's SHA-256). checkpoint consolidate DIR --output FILE: the
// checkpoint's weights as one safetensors file of whole tensors (version
// 1's model.safetensors), for tools that want one.
int RunCheckpointCommand(const std::vector<std::string>& arguments);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_COMMANDS_H_
