// For fault tests (plateau-worker train --exit_during_checkpoint): one rank
// ends as a killed process ends, in the middle of writing its shard of one
// checkpoint, so that a test can show the checkpoint before it survives.
#ifndef PLATEAU_WORKER_CLI_CHECKPOINT_CRASH_H_
#define PLATEAU_WORKER_CLI_CHECKPOINT_CRASH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_system.h"

namespace plateau::worker {

// The process exit status of a rank ended this way.
inline constexpr int kCheckpointCrashExitCode = 86;

struct CheckpointCrash {
  int rank = 0;
  int64_t step = 0;
  // Chunks of its shard files (safetensors tensors) the rank writes first.
  int64_t chunks = 0;
};

// "RANK:STEP:CHUNKS"; nullopt for ""; INVALID_ARGUMENT naming the flag
// otherwise.
absl::StatusOr<std::optional<CheckpointCrash>> ParseCheckpointCrash(
    absl::string_view text);

// The real file system, except that once `crash.chunks` chunks of the
// shard files of step `crash.step`'s checkpoint have been appended, the
// process exits with kCheckpointCrashExitCode, syncing and closing nothing.
// Install it on rank `crash.rank` only. Thread-safe.
std::unique_ptr<FileSystem> CrashingCheckpointFileSystem(
    const CheckpointCrash& crash);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_CHECKPOINT_CRASH_H_
