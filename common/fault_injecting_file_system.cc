#include "common/fault_injecting_file_system.h"

#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace plateau {
namespace {

bool IsAtOrUnder(const std::string& path, const std::string& root) {
  return path == root || absl::StartsWith(path, root + "/");
}

}  // namespace

const char* StorageFaultName(StorageFault fault) {
  switch (fault) {
    case StorageFault::kNoSpace:
      return "disk full";
    case StorageFault::kIoError:
      return "EIO";
    case StorageFault::kShortWrite:
      return "short write";
    case StorageFault::kCrash:
      return "crash";
  }
  return "?";
}

class FaultInjectingFileSystem::File : public WritableFile {
 public:
  File(FaultInjectingFileSystem& owner, std::string path,
       std::unique_ptr<WritableFile> base)
      : owner_(owner), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status Append(absl::string_view bytes) override {
    absl::Status status = owner_.Step(
        absl::StrCat("append ", path_, " ", bytes.size(), " bytes"));
    const bool short_write = !status.ok() && !owner_.crashed_ &&
                             owner_.fault_ == StorageFault::kShortWrite;
    if (!status.ok() && !short_write) return status;
    const absl::string_view written =
        short_write ? bytes.substr(0, bytes.size() / 2) : bytes;
    RETURN_IF_ERROR(base_->Append(written));
    owner_.tracked_[path_].written_bytes +=
        static_cast<int64_t>(written.size());
    return status;
  }

  absl::Status Sync() override {
    RETURN_IF_ERROR(owner_.Step(absl::StrCat("sync ", path_)));
    RETURN_IF_ERROR(base_->Sync());
    Durability& durability = owner_.tracked_[path_];
    durability.synced_bytes = durability.written_bytes;
    return absl::OkStatus();
  }

  absl::Status Close() override {
    RETURN_IF_ERROR(owner_.Step(absl::StrCat("close ", path_)));
    return base_->Close();
  }

 private:
  FaultInjectingFileSystem& owner_;
  const std::string path_;
  std::unique_ptr<WritableFile> base_;
};

void FaultInjectingFileSystem::InjectAt(int64_t step, StorageFault fault) {
  fault_step_ = step;
  fault_ = fault;
}

absl::Status FaultInjectingFileSystem::Step(const std::string& description) {
  ++steps_;
  log_.push_back(absl::StrCat(steps_, " ", description));
  if (!crashed_ && steps_ == fault_step_ && fault_ == StorageFault::kCrash) {
    crashed_ = true;
    TearUnsyncedFiles();
  }
  if (crashed_) {
    return absl::AbortedError(
        absl::StrCat("injected crash before step ", description));
  }
  if (steps_ != fault_step_) return absl::OkStatus();
  const int error_number = fault_ == StorageFault::kIoError ? EIO : ENOSPC;
  return absl::ErrnoToStatus(
      error_number,
      absl::StrCat("injected ", StorageFaultName(fault_), ": ", description));
}

void FaultInjectingFileSystem::TearUnsyncedFiles() {
  for (const auto& [path, durability] : tracked_) {
    if (durability.written_bytes == durability.synced_bytes) continue;
    const int64_t kept_bytes =
        durability.synced_bytes +
        (durability.written_bytes - durability.synced_bytes) / 2;
    // A file removed since is not there to tear: nothing to do then.
    if (::truncate(path.c_str(), kept_bytes) != 0) continue;
  }
}

void FaultInjectingFileSystem::MoveTracked(const std::string& from,
                                           const std::string& to) {
  std::map<std::string, Durability> moved;
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    if (IsAtOrUnder(it->first, from)) {
      moved[to + it->first.substr(from.size())] = it->second;
      it = tracked_.erase(it);
    } else {
      ++it;
    }
  }
  tracked_.merge(moved);
}

void FaultInjectingFileSystem::ForgetTracked(const std::string& path) {
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    it = IsAtOrUnder(it->first, path) ? tracked_.erase(it) : std::next(it);
  }
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectingFileSystem::NewWritableFile(const std::string& path,
                                          bool exclusive) {
  RETURN_IF_ERROR(Step(absl::StrCat("create ", path)));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                   base_.NewWritableFile(path, exclusive));
  tracked_[path] = Durability{};
  return std::make_unique<File>(*this, path, std::move(file));
}

absl::Status FaultInjectingFileSystem::CreateDirectory(
    const std::string& path) {
  RETURN_IF_ERROR(Step(absl::StrCat("mkdir ", path)));
  return base_.CreateDirectory(path);
}

absl::Status FaultInjectingFileSystem::Rename(const std::string& from,
                                              const std::string& to) {
  RETURN_IF_ERROR(Step(absl::StrCat("rename ", from, " ", to)));
  RETURN_IF_ERROR(base_.Rename(from, to));
  ForgetTracked(to);
  MoveTracked(from, to);
  return absl::OkStatus();
}

absl::StatusOr<bool> FaultInjectingFileSystem::Exchange(const std::string& a,
                                                        const std::string& b) {
  RETURN_IF_ERROR(Step(absl::StrCat("exchange ", a, " ", b)));
  ASSIGN_OR_RETURN(const bool exchanged, base_.Exchange(a, b));
  if (exchanged) {
    const std::string aside = a + "\n";  // no path has a newline here
    MoveTracked(a, aside);
    MoveTracked(b, a);
    MoveTracked(aside, b);
  }
  return exchanged;
}

absl::Status FaultInjectingFileSystem::SyncDirectory(const std::string& path) {
  RETURN_IF_ERROR(Step(absl::StrCat("sync directory ", path)));
  return base_.SyncDirectory(path);
}

absl::Status FaultInjectingFileSystem::RemoveAll(const std::string& path) {
  RETURN_IF_ERROR(Step(absl::StrCat("remove ", path)));
  RETURN_IF_ERROR(base_.RemoveAll(path));
  ForgetTracked(path);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MappedFile>> FaultInjectingFileSystem::MapFile(
    const std::string& path) {
  if (fail_reads_) {
    return absl::ErrnoToStatus(EIO, absl::StrCat("injected EIO: read ", path));
  }
  return base_.MapFile(path);
}

}  // namespace plateau
