#include "worker/cli/checkpoint_crash.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/checkpoint/checkpoint.h"

namespace plateau::worker {
namespace {

// Each shard file is written as its length, its header, then one append a
// tensor (WriteSafetensors).
constexpr int kAppendsBeforeChunks = 2;

class CountingFile : public WritableFile {
 public:
  CountingFile(std::unique_ptr<WritableFile> file,
               std::atomic<int64_t>* chunks_left)
      : file_(std::move(file)), chunks_left_(chunks_left) {}

  absl::Status Append(absl::string_view bytes) override {
    RETURN_IF_ERROR(file_->Append(bytes));
    if (++appends_ > kAppendsBeforeChunks && chunks_left_->fetch_sub(1) == 1) {
      std::cerr << "plateau-worker train: --exit_during_checkpoint: exiting "
                   "in the middle of this rank's checkpoint write\n";
      std::cerr.flush();
      _exit(kCheckpointCrashExitCode);
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override { return file_->Sync(); }
  absl::Status Close() override { return file_->Close(); }

 private:
  std::unique_ptr<WritableFile> file_;
  std::atomic<int64_t>* chunks_left_;
  int64_t appends_ = 0;
};

class CrashingFileSystem : public FileSystemWrapper {
 public:
  explicit CrashingFileSystem(const CheckpointCrash& crash)
      : FileSystemWrapper(PosixFileSystem()),
        staging_prefix_(absl::StrCat(
            ".", engine::CheckpointDirectoryName(crash.step), ".tmp-")),
        chunks_left_(crash.chunks) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, bool exclusive) override {
    absl::StatusOr<std::unique_ptr<WritableFile>> file =
        base().NewWritableFile(path, exclusive);
    if (!file.ok() || !IsWatchedShardFile(path)) return file;
    return std::make_unique<CountingFile>(*std::move(file), &chunks_left_);
  }

 private:
  // A shard file (or the temporary file it is written as) in the watched
  // step's staging directory.
  bool IsWatchedShardFile(const std::string& path) const {
    const std::filesystem::path file(path);
    const std::string name = file.filename().string();
    return absl::StartsWith(file.parent_path().filename().string(),
                            staging_prefix_) &&
           absl::StrContains(name, ".rank-") &&
           absl::StrContains(name, ".safetensors");
  }

  const std::string staging_prefix_;
  std::atomic<int64_t> chunks_left_;
};

}  // namespace

absl::StatusOr<std::optional<CheckpointCrash>> ParseCheckpointCrash(
    absl::string_view text) {
  if (text.empty()) return std::nullopt;
  const std::vector<absl::string_view> fields = absl::StrSplit(text, ':');
  CheckpointCrash crash;
  if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &crash.rank) ||
      !absl::SimpleAtoi(fields[1], &crash.step) ||
      !absl::SimpleAtoi(fields[2], &crash.chunks) || crash.rank < 0 ||
      crash.step < 1 || crash.chunks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--exit_during_checkpoint must be RANK:STEP:CHUNKS (rank >= 0, step "
        "and chunks >= 1), got \"",
        text, "\""));
  }
  return crash;
}

std::unique_ptr<FileSystem> CrashingCheckpointFileSystem(
    const CheckpointCrash& crash) {
  return std::make_unique<CrashingFileSystem>(crash);
}

}  // namespace plateau::worker
