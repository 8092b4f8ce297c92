// For tests: a FileSystem over the real one that fails one chosen step the
// way storage fails. Steps are numbered from 1 in call
// order, counting every call but MapFile: NewWritableFile, Append, Sync,
// Close, CreateDirectory, Rename, Exchange, SyncDirectory, RemoveAll. A test
// runs its write once to count the steps, then once per step and fault.
//
// A crash models a machine that loses power before the step: that step and
// every later one fail, and each file keeps only its synced bytes plus half
// of those appended since (a torn write); what the page cache had not made
// durable is gone. Renames and removals already done stay done. (Files are
// followed through renames of themselves or their directories, but must not
// be renamed while open.)
//
// Not thread-safe.
#ifndef PLATEAU_COMMON_FAULT_INJECTING_FILE_SYSTEM_H_
#define PLATEAU_COMMON_FAULT_INJECTING_FILE_SYSTEM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/file_system.h"

namespace plateau {

enum class StorageFault {
  kNoSpace,     // ENOSPC; the step does nothing
  kIoError,     // EIO; the step does nothing
  kShortWrite,  // an Append writes half its bytes, then ENOSPC; other steps
                // as kNoSpace
  kCrash,       // see the top of this file
};
const char* StorageFaultName(StorageFault fault);

class FaultInjectingFileSystem : public FileSystem {
 public:
  FaultInjectingFileSystem() = default;

  // Fails step `step` with `fault`; 0 injects nothing.
  void InjectAt(int64_t step, StorageFault fault);
  // Every MapFile fails with EIO while set.
  void FailReads(bool fail) { fail_reads_ = fail; }

  // Steps taken so far, the failed one included.
  int64_t steps() const { return steps_; }
  bool crashed() const { return crashed_; }
  // One line per step ("3 append /x/model.safetensors 128 bytes"), for
  // messages.
  const std::vector<std::string>& log() const { return log_; }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, bool exclusive) override;
  absl::Status CreateDirectory(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::StatusOr<bool> Exchange(const std::string& a,
                                const std::string& b) override;
  absl::Status SyncDirectory(const std::string& path) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<MappedFile>> MapFile(
      const std::string& path) override;

 private:
  class File;
  struct Durability {
    int64_t written_bytes = 0;
    int64_t synced_bytes = 0;
  };

  // Counts a step; the injected error if this is the step (or after a
  // crash), else OK. A crash tears the files first.
  absl::Status Step(const std::string& description);
  void TearUnsyncedFiles();
  // Re-keys the durability of `from` and everything under it to `to`.
  void MoveTracked(const std::string& from, const std::string& to);
  void ForgetTracked(const std::string& path);

  FileSystem& base_ = PosixFileSystem();
  int64_t steps_ = 0;
  int64_t fault_step_ = 0;
  StorageFault fault_ = StorageFault::kNoSpace;
  bool crashed_ = false;
  bool fail_reads_ = false;
  std::vector<std::string> log_;
  std::map<std::string, Durability> tracked_;  // by current path
};

}  // namespace plateau

#endif  // PLATEAU_COMMON_FAULT_INJECTING_FILE_SYSTEM_H_
