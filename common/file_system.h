// The file-system steps of a durable write (create, append, fsync, rename,
// exchange, remove) and the read that maps a file, behind one interface, in
// the manner of LevelDB's Env: code that must survive faults takes a
// FileSystem, production passes PosixFileSystem(), and tests pass the
// fault-injecting twin (common/fault_injecting_file_system.h) to fail or
// crash any one step. Every error names the path and carries errno's text
// (ENOSPC is RESOURCE_EXHAUSTED, EIO UNKNOWN, as absl::ErrnoToStatus maps
// them).
#ifndef PLATEAU_COMMON_FILE_SYSTEM_H_
#define PLATEAU_COMMON_FILE_SYSTEM_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace plateau {

class MappedFile;

// A file open for writing. Not thread-safe. Destroying it unclosed closes
// it and drops the error.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(absl::string_view bytes) = 0;
  virtual absl::Status Sync() = 0;  // fsync: the bytes so far are durable
  virtual absl::Status Close() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates (mode 0644) or truncates `path`; with `exclusive`, ALREADY_EXISTS
  // when it exists (O_EXCL), for temporary files of unique names.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, bool exclusive) = 0;
  // mkdir (mode 0755); ALREADY_EXISTS when it exists.
  virtual absl::Status CreateDirectory(const std::string& path) = 0;
  // rename(2): replaces a file or an empty directory atomically.
  virtual absl::Status Rename(const std::string& from,
                              const std::string& to) = 0;
  // Swaps two existing paths atomically (renameat2 RENAME_EXCHANGE); false,
  // changing nothing, where the kernel or file system cannot.
  virtual absl::StatusOr<bool> Exchange(const std::string& a,
                                        const std::string& b) = 0;
  // fsyncs a directory: entries created or renamed in it are durable.
  virtual absl::Status SyncDirectory(const std::string& path) = 0;
  // Removes a file, or a directory and everything in it; OK when absent.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
  // A read-only mmap of the whole file.
  virtual absl::StatusOr<std::unique_ptr<MappedFile>> MapFile(
      const std::string& path) = 0;
};

// The real file system. Thread-safe; lives forever.
FileSystem& PosixFileSystem();

// Forwards every call to `base` (LevelDB's EnvWrapper): a file system that
// changes a few calls overrides those alone.
class FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(FileSystem& base) : base_(base) {}

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

 protected:
  FileSystem& base() { return base_; }

 private:
  FileSystem& base_;
};

}  // namespace plateau

#endif  // PLATEAU_COMMON_FILE_SYSTEM_H_
