#include "daemon/store/fault_injecting_file_system.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace plateau::daemon {
namespace {

constexpr std::array<StoreFileKind, 6> kKinds = {
    StoreFileKind::kWal,     StoreFileKind::kTable,   StoreFileKind::kManifest,
    StoreFileKind::kCurrent, StoreFileKind::kOptions, StoreFileKind::kOther};
constexpr std::array<FileOperation, 5> kOperations = {
    FileOperation::kOpen, FileOperation::kAppend, FileOperation::kSync,
    FileOperation::kClose, FileOperation::kRename};
constexpr std::array<InjectedError, 2> kErrors = {InjectedError::kNoSpace,
                                                  InjectedError::kIoError};

// The value of `names` whose name is `name`, or INVALID_ARGUMENT listing them.
template <typename Value, size_t kCount>
absl::StatusOr<Value> ParseName(absl::string_view what,
                                const std::array<Value, kCount>& values,
                                absl::string_view (*name_of)(Value),
                                absl::string_view name) {
  for (const Value value : values) {
    if (name_of(value) == name) return value;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "no ", what, " is called '", name, "'; there are ",
      absl::StrJoin(values, ", ", [&](std::string* out, Value value) {
        absl::StrAppend(out, name_of(value));
      })));
}

bool IsDigits(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

// A file opened for writing whose operations can fail by injection.
class FaultyFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultyFile(std::unique_ptr<rocksdb::FSWritableFile> base, StoreFileKind kind,
             FaultInjectingFileSystem& file_system)
      : rocksdb::FSWritableFileOwnerWrapper(std::move(base)),
        kind_(kind),
        file_system_(file_system) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
    if (rocksdb::IOStatus status = Injected(FileOperation::kAppend);
        !status.ok()) {
      return status;
    }
    return FSWritableFileOwnerWrapper::Append(data, options, debug);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* debug) override {
    if (rocksdb::IOStatus status = Injected(FileOperation::kAppend);
        !status.ok()) {
      return status;
    }
    return FSWritableFileOwnerWrapper::Append(data, options, info, debug);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     rocksdb::IODebugContext* debug) override {
    if (rocksdb::IOStatus status = Injected(FileOperation::kAppend);
        !status.ok()) {
      return status;
    }
    return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, options,
                                                        debug);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                         rocksdb::IODebugContext* debug) override {
    if (rocksdb::IOStatus status = Injected(FileOperation::kSync);
        !status.ok()) {
      return status;
    }
    return FSWritableFileOwnerWrapper::Sync(options, debug);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* debug) override {
    if (rocksdb::IOStatus status = Injected(FileOperation::kSync);
        !status.ok()) {
      return status;
    }
    return FSWritableFileOwnerWrapper::Fsync(options, debug);
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* debug) override {
    if (rocksdb::IOStatus status = Injected(FileOperation::kClose);
        !status.ok()) {
      // The descriptor is released all the same, as close(2) does.
      FSWritableFileOwnerWrapper::Close(options, debug).PermitUncheckedError();
      return status;
    }
    return FSWritableFileOwnerWrapper::Close(options, debug);
  }

 private:
  rocksdb::IOStatus Injected(FileOperation operation) {
    return file_system_.Injected(kind_, operation);
  }

  const StoreFileKind kind_;
  FaultInjectingFileSystem& file_system_;
};

}  // namespace

StoreFileKind KindOfStoreFile(absl::string_view path) {
  const size_t slash = path.rfind('/');
  const absl::string_view name =
      slash == absl::string_view::npos ? path : path.substr(slash + 1);
  if (absl::StartsWith(name, "OPTIONS")) return StoreFileKind::kOptions;
  if (absl::StartsWith(name, "MANIFEST-")) return StoreFileKind::kManifest;
  if (name == "CURRENT") return StoreFileKind::kCurrent;
  if (absl::EndsWith(name, ".dbtmp") &&
      IsDigits(name.substr(0, name.size() - 6))) {
    return StoreFileKind::kCurrent;
  }
  if (absl::EndsWith(name, ".sst")) return StoreFileKind::kTable;
  if (absl::EndsWith(name, ".log") && IsDigits(name.substr(0, name.size() - 4)))
    return StoreFileKind::kWal;
  return StoreFileKind::kOther;
}

absl::string_view StoreFileKindName(StoreFileKind kind) {
  switch (kind) {
    case StoreFileKind::kWal:
      return "WAL";
    case StoreFileKind::kTable:
      return "SST";
    case StoreFileKind::kManifest:
      return "MANIFEST";
    case StoreFileKind::kCurrent:
      return "CURRENT";
    case StoreFileKind::kOptions:
      return "OPTIONS";
    case StoreFileKind::kOther:
      break;
  }
  return "other";
}

absl::string_view FileOperationName(FileOperation operation) {
  switch (operation) {
    case FileOperation::kOpen:
      return "open";
    case FileOperation::kAppend:
      return "append";
    case FileOperation::kSync:
      return "sync";
    case FileOperation::kClose:
      return "close";
    case FileOperation::kRename:
      break;
  }
  return "rename";
}

absl::string_view InjectedErrorName(InjectedError error) {
  return error == InjectedError::kNoSpace ? "ENOSPC" : "EIO";
}

absl::StatusOr<StoreFileKind> ParseStoreFileKind(absl::string_view name) {
  return ParseName("file kind", kKinds, StoreFileKindName, name);
}
absl::StatusOr<FileOperation> ParseFileOperation(absl::string_view name) {
  return ParseName("file operation", kOperations, FileOperationName, name);
}
absl::StatusOr<InjectedError> ParseInjectedError(absl::string_view name) {
  return ParseName("injected error", kErrors, InjectedErrorName, name);
}

FaultInjectingFileSystem::FaultInjectingFileSystem()
    : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}

void FaultInjectingFileSystem::Set(std::optional<InjectedFault> fault) {
  absl::MutexLock lock(&mutex_);
  fault_ = fault;
}

int64_t FaultInjectingFileSystem::injected() const {
  absl::MutexLock lock(&mutex_);
  return injected_;
}

rocksdb::IOStatus FaultInjectingFileSystem::Injected(StoreFileKind kind,
                                                     FileOperation operation) {
  absl::MutexLock lock(&mutex_);
  if (!fault_.has_value() || fault_->kind != kind ||
      fault_->operation != operation) {
    return rocksdb::IOStatus::OK();
  }
  ++injected_;
  const std::string what = absl::StrCat("injected ", StoreFileKindName(kind),
                                        " ", FileOperationName(operation));
  return fault_->error == InjectedError::kNoSpace
             ? rocksdb::IOStatus::NoSpace(what, "No space left on device")
             : rocksdb::IOStatus::IOError(what, "Input/output error");
}

rocksdb::IOStatus FaultInjectingFileSystem::Wrap(
    const std::string& path, rocksdb::IOStatus opened,
    std::unique_ptr<rocksdb::FSWritableFile>* result) {
  if (!opened.ok()) return opened;
  const StoreFileKind kind = KindOfStoreFile(path);
  if (rocksdb::IOStatus status = Injected(kind, FileOperation::kOpen);
      !status.ok()) {
    // The file was created, as it may be when open(2) fails late.
    result->reset();
    return status;
  }
  *result = std::make_unique<FaultyFile>(std::move(*result), kind, *this);
  return opened;
}

rocksdb::IOStatus FaultInjectingFileSystem::NewWritableFile(
    const std::string& path, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* debug) {
  return Wrap(path, target()->NewWritableFile(path, options, result, debug),
              result);
}

rocksdb::IOStatus FaultInjectingFileSystem::ReopenWritableFile(
    const std::string& path, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* debug) {
  return Wrap(path, target()->ReopenWritableFile(path, options, result, debug),
              result);
}

rocksdb::IOStatus FaultInjectingFileSystem::ReuseWritableFile(
    const std::string& path, const std::string& old_path,
    const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* debug) {
  return Wrap(
      path, target()->ReuseWritableFile(path, old_path, options, result, debug),
      result);
}

rocksdb::IOStatus FaultInjectingFileSystem::RenameFile(
    const std::string& source, const std::string& target,
    const rocksdb::IOOptions& options, rocksdb::IODebugContext* debug) {
  if (rocksdb::IOStatus status =
          Injected(KindOfStoreFile(target), FileOperation::kRename);
      !status.ok()) {
    return status;
  }
  return this->target()->RenameFile(source, target, options, debug);
}

}  // namespace plateau::daemon
