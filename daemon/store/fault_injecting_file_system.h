// FaultInjectingFileSystem: the real file system, except that one kind of
// RocksDB file fails one operation while a fault is set, the way a full disk
// (ENOSPC) or a failing device (EIO) fails it. Tests open a RocksDbStore on
// it (RocksDbStoreOptions::file_system) to see what the store does when its
// log, a table, the MANIFEST, CURRENT or an OPTIONS file cannot be written.
//
// Thread-safe: RocksDB's background threads write through it while the test
// sets and clears faults.
#ifndef PLATEAU_DAEMON_STORE_FAULT_INJECTING_FILE_SYSTEM_H_
#define PLATEAU_DAEMON_STORE_FAULT_INJECTING_FILE_SYSTEM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/file_system.h"

namespace plateau::daemon {

// RocksDB's files by role, told apart by name. CURRENT and OPTIONS files are
// written as "<number>.dbtmp" / "OPTIONS-<number>.dbtmp" and renamed into
// place; the temporary file counts as what it becomes.
enum class StoreFileKind {
  kWal,
  kTable,
  kManifest,
  kCurrent,
  kOptions,
  kOther
};
// What RocksDB does to a file: create or reopen it for writing, append to
// it, sync it (fsync or fdatasync), close it, rename it (by its new name).
enum class FileOperation { kOpen, kAppend, kSync, kClose, kRename };
enum class InjectedError { kNoSpace, kIoError };

StoreFileKind KindOfStoreFile(absl::string_view path);
absl::string_view StoreFileKindName(StoreFileKind kind);  // "WAL", "SST"...
absl::string_view FileOperationName(FileOperation operation);  // "append"...
absl::string_view InjectedErrorName(InjectedError error);  // "ENOSPC", "EIO"
// The inverses, for command lines; INVALID_ARGUMENT naming the choices.
absl::StatusOr<StoreFileKind> ParseStoreFileKind(absl::string_view name);
absl::StatusOr<FileOperation> ParseFileOperation(absl::string_view name);
absl::StatusOr<InjectedError> ParseInjectedError(absl::string_view name);

struct InjectedFault {
  StoreFileKind kind = StoreFileKind::kWal;
  FileOperation operation = FileOperation::kAppend;
  InjectedError error = InjectedError::kNoSpace;
};

class FaultInjectingFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultInjectingFileSystem();
  const char* Name() const override { return "FaultInjectingFileSystem"; }

  // From now on every matching operation fails; nullopt: none does.
  void Set(std::optional<InjectedFault> fault);
  // How many operations have failed by injection.
  int64_t injected() const;

  rocksdb::IOStatus NewWritableFile(
      const std::string& path, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* debug) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& path, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* debug) override;
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& path, const std::string& old_path,
      const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* debug) override;
  rocksdb::IOStatus RenameFile(const std::string& source,
                               const std::string& target,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* debug) override;

  // The injected failure of `operation` on a file of `kind`, or OK.
  rocksdb::IOStatus Injected(StoreFileKind kind, FileOperation operation);

 private:
  // Wraps a file opened for writing so that its operations can fail.
  rocksdb::IOStatus Wrap(const std::string& path, rocksdb::IOStatus opened,
                         std::unique_ptr<rocksdb::FSWritableFile>* result);

  mutable absl::Mutex mutex_;
  std::optional<InjectedFault> fault_ ABSL_GUARDED_BY(mutex_);
  int64_t injected_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_STORE_FAULT_INJECTING_FILE_SYSTEM_H_
