// plateau-data, the data tool that lives beside plateau-worker: the one
// binary that links SentencePiece, which cannot share a process with
// protobuf (engine/data/BUILD).
#ifndef PLATEAU_WORKER_CLI_DATA_TOOL_H_
#define PLATEAU_WORKER_CLI_DATA_TOOL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace plateau::worker {

// plateau-data in this process's binary's directory.
absl::StatusOr<std::string> DataToolPath();

// Runs plateau-data with `arguments` and returns what it printed on
// stdout; its stderr is this process's. An error, with its exit status,
// when it cannot be run or does not exit 0.
absl::StatusOr<std::string> RunDataTool(
    const std::vector<std::string>& arguments);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_DATA_TOOL_H_
