#include "engine/train/background_shard_writer.h"

#include <chrono>
#include <utility>

namespace plateau::engine {

BackgroundShardWriter::~BackgroundShardWriter() {
  if (in_flight()) Wait().IgnoreError();
}

void BackgroundShardWriter::Start(ShardSnapshot snapshot, std::string staging,
                                  int rank, ShardWriteOptions options) {
  finished_.store(false, std::memory_order_relaxed);
  snapshot_ = std::move(snapshot);
  const ShardContents* contents = &snapshot_->contents;
  thread_ = std::thread([this, contents, staging = std::move(staging), rank,
                         options = std::move(options)]() {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ShardWriteResult> files =
        WriteCheckpointShard(staging, rank, *contents, options);
    if (files.ok()) {
      BackgroundWriteResult result;
      result.files = *files;
      result.write_seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      result_ = result;
    } else {
      result_ = files.status();
    }
    finished_.store(true, std::memory_order_release);
  });
}

absl::StatusOr<BackgroundWriteResult> BackgroundShardWriter::Wait() {
  thread_.join();
  snapshot_.reset();
  return std::move(result_);
}

}  // namespace plateau::engine
