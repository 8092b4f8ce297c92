#include "worker/agent/rank_status.h"

#include <unistd.h>

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/memory/memory_component.h"

namespace plateau::worker {

std::string RankStatusPath(const std::string& directory, int rank) {
  return absl::StrCat(directory, "/rank-", rank, ".status");
}

absl::Status WriteRankStatus(const std::string& path,
                             const v1::RankStatus& status) {
  return WriteFileAtomically(path, {status.SerializeAsString()},
                             Durability::kUnsynced);
}

absl::StatusOr<v1::RankStatus> ReadRankStatus(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  v1::RankStatus status;
  if (!status.ParseFromString(*bytes)) {
    return absl::DataLossError(absl::StrCat(path, " is not a rank status"));
  }
  return status;
}

RankStatusPublisher::RankStatusPublisher(std::string path, int rank,
                                         std::chrono::milliseconds interval)
    : path_(std::move(path)), rank_(rank), interval_(interval) {}

void RankStatusPublisher::OnProgress(engine::Trainer& trainer) {
  const bool run_ends =
      trainer.completed_steps() >= trainer.spec().train().steps();
  const bool new_checkpoint =
      trainer.last_checkpoint_step() != last_checkpoint_step_;
  if (!run_ends && !new_checkpoint &&
      std::chrono::steady_clock::now() - last_write_ < interval_) {
    return;
  }
  Publish(trainer);
}

void RankStatusPublisher::Publish(engine::Trainer& trainer) {
  const absl::Status written = WriteRankStatus(path_, StatusOf(trainer));
  if (!written.ok()) std::cerr << "rank status: " << written << "\n";
  last_write_ = std::chrono::steady_clock::now();
  last_checkpoint_step_ = trainer.last_checkpoint_step();
}

v1::RankStatus RankStatusPublisher::StatusOf(engine::Trainer& trainer) {
  const engine::TrainingRecord& record = trainer.record();
  // Throughput over the steps since the last write (step time only, as the
  // trainer's log line counts it).
  int64_t tokens = 0;
  double seconds = 0.0;
  for (size_t i = steps_counted_; i < record.steps.size(); ++i) {
    tokens += record.steps[i].tokens;
    seconds += record.steps[i].seconds;
  }
  if (seconds > 0.0) tokens_per_second_ = static_cast<double>(tokens) / seconds;
  steps_counted_ = record.steps.size();

  v1::RankStatus status;
  status.set_rank(rank_);
  status.set_pid(static_cast<int32_t>(getpid()));
  v1::JobProgress& progress = *status.mutable_progress();
  progress.set_step(trainer.completed_steps());
  progress.set_total_steps(trainer.spec().train().steps());
  if (!record.steps.empty()) progress.set_loss(record.steps.back().loss);
  if (!record.validations.empty()) {
    progress.set_validation_loss(record.validations.back().cross_entropy);
  }
  progress.set_tokens_per_second(tokens_per_second_);
  int64_t tokens_total = 0;
  for (const engine::StepRecord& step : record.steps)
    tokens_total += step.tokens;
  progress.set_tokens_total(tokens_total);
  progress.set_checkpoint_step(trainer.last_checkpoint_step());
  progress.set_checkpoint_location(trainer.last_checkpoint());
  // Only of a checkpoint this run wrote (a resumed run's record holds its
  // predecessors' too).
  if (trainer.last_checkpoint_bytes_written() > 0) {
    progress.set_checkpoint_stall_seconds(
        record.checkpoint_writes.back().stall_seconds);
    progress.set_checkpoint_write_seconds(
        record.checkpoint_writes.back().write_seconds);
    progress.set_checkpoint_bytes_written(
        trainer.last_checkpoint_bytes_written());
  }

  engine::AccountedAllocator& allocator = trainer.backend().allocator();
  v1::RankMemory& memory = *status.mutable_memory();
  memory.set_rank(rank_);
  memory.set_device_capacity_bytes(
      allocator.capacity_bytes(engine::MemoryPool::kDevice));
  const engine::MemoryUsage device =
      allocator.PoolUsage(engine::MemoryPool::kDevice);
  memory.set_device_current_bytes(device.current_bytes);
  memory.set_device_peak_bytes(device.peak_bytes);
  for (const engine::MemoryPool pool :
       {engine::MemoryPool::kDevice, engine::MemoryPool::kHost}) {
    for (int c = 0; c < engine::kMemoryComponentCount; ++c) {
      const auto component = static_cast<engine::MemoryComponent>(c);
      const engine::MemoryUsage usage = allocator.Usage(pool, component);
      v1::MemoryUsage& entry = *memory.add_usage();
      entry.set_pool(engine::MemoryPoolProto(pool));
      entry.set_component(engine::MemoryComponentProto(component));
      entry.set_current_bytes(usage.current_bytes);
      entry.set_peak_bytes(usage.peak_bytes);
    }
  }
  for (size_t layer = 0; layer < record.expert_tokens.size(); ++layer) {
    v1::ExpertLoad& load = *status.add_expert_tokens();
    load.set_layer(static_cast<int32_t>(layer));
    for (const int64_t count : record.expert_tokens[layer]) {
      load.add_tokens(count);
    }
  }
  for (const auto& [tier, bytes] : trainer.optimizer().StateBytesByTier()) {
    (*status.mutable_optimizer_state_bytes())[tier] = bytes;
  }
  return status;
}

}  // namespace plateau::worker
