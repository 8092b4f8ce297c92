// Writes one rank's checkpoint shard on a thread of its own, so that
// training goes on while the shard is persisted and checksummed
// (TrainSpec.checkpoint_write: background). It takes the snapshot the shard
// was copied into (component `snapshot`) and holds it until Wait, which
// frees it on the caller's thread: the snapshot's bytes are planned as held
// across the steps a write spans (plan/rank_replay.cc). One write at a
// time; the trainer decides when to wait (docs/ARCHITECTURE.md section 8).
#ifndef PLATEAU_ENGINE_TRAIN_BACKGROUND_SHARD_WRITER_H_
#define PLATEAU_ENGINE_TRAIN_BACKGROUND_SHARD_WRITER_H_

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/train/model_io.h"

namespace plateau::engine {

// What a background write did.
struct BackgroundWriteResult {
  ShardWriteResult files;
  double write_seconds = 0.0;  // on the writer's thread
};

class BackgroundShardWriter {
 public:
  BackgroundShardWriter() = default;
  // Waits for a write in flight.
  ~BackgroundShardWriter();
  BackgroundShardWriter(const BackgroundShardWriter&) = delete;
  BackgroundShardWriter& operator=(const BackgroundShardWriter&) = delete;

  // Starts writing `snapshot`'s chunks as `rank`'s shard into `staging`
  // (WriteCheckpointShard). REQUIRES: !in_flight(); `options.file_system`
  // outlives the write.
  void Start(ShardSnapshot snapshot, std::string staging, int rank,
             ShardWriteOptions options);
  // A write was started and not yet waited for.
  bool in_flight() const { return thread_.joinable(); }
  // The write in flight has ended (Wait will not block). REQUIRES:
  // in_flight().
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Blocks until the write in flight ends, frees its snapshot and returns
  // how it ended. REQUIRES: in_flight().
  absl::StatusOr<BackgroundWriteResult> Wait();

 private:
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::optional<ShardSnapshot> snapshot_;
  // Set by the thread before `finished_`.
  absl::StatusOr<BackgroundWriteResult> result_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_BACKGROUND_SHARD_WRITER_H_
