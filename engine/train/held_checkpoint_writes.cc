#include "engine/train/held_checkpoint_writes.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/checkpoint/checkpoint.h"

namespace plateau::engine {

class HeldCheckpointWrites::File : public WritableFile {
 public:
  File(std::unique_ptr<WritableFile> file, HeldCheckpointWrites* owner)
      : file_(std::move(file)), owner_(owner) {}

  absl::Status Append(absl::string_view bytes) override {
    if (owner_->mode_ == Mode::kFail) {
      return absl::DataLossError("EIO (injected)");
    }
    owner_->mutex_.LockWhenWithTimeout(absl::Condition(&owner_->released_),
                                       absl::Seconds(30));
    const bool released = owner_->released_;
    owner_->mutex_.Unlock();
    if (!released) {
      return absl::DeadlineExceededError(
          "the held write was not released within 30 s");
    }
    return file_->Append(bytes);
  }
  absl::Status Sync() override { return file_->Sync(); }
  absl::Status Close() override { return file_->Close(); }

 private:
  std::unique_ptr<WritableFile> file_;
  HeldCheckpointWrites* owner_;
};

HeldCheckpointWrites::HeldCheckpointWrites(int64_t step, Mode mode)
    : FileSystemWrapper(PosixFileSystem()),
      staging_prefix_(
          absl::StrCat(".", CheckpointDirectoryName(step), ".tmp-")),
      mode_(mode) {}

void HeldCheckpointWrites::Release() {
  absl::MutexLock lock(&mutex_);
  released_ = true;
}

absl::StatusOr<std::unique_ptr<WritableFile>>
HeldCheckpointWrites::NewWritableFile(const std::string& path, bool exclusive) {
  absl::StatusOr<std::unique_ptr<WritableFile>> file =
      base().NewWritableFile(path, exclusive);
  if (!file.ok() || !absl::StrContains(path, staging_prefix_)) return file;
  return std::make_unique<File>(*std::move(file), this);
}

}  // namespace plateau::engine
