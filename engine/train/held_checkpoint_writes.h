// For tests: the real file system, except for the shard files of one
// step's checkpoint, whose appends wait until Release() (kHold; 30 s at
// most, then DEADLINE_EXCEEDED, so that a trainer that waits for the held
// write fails instead of hanging) or fail with DATA_LOSS (kFail). Hands a
// test the moment a background write is still in flight.
#ifndef PLATEAU_ENGINE_TRAIN_HELD_CHECKPOINT_WRITES_H_
#define PLATEAU_ENGINE_TRAIN_HELD_CHECKPOINT_WRITES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/file_system.h"

namespace plateau::engine {

class HeldCheckpointWrites : public FileSystemWrapper {
 public:
  enum class Mode { kHold, kFail };
  HeldCheckpointWrites(int64_t step, Mode mode);

  void Release();

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, bool exclusive) override;

 private:
  class File;

  const std::string staging_prefix_;
  const Mode mode_;
  absl::Mutex mutex_;
  bool released_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_HELD_CHECKPOINT_WRITES_H_
