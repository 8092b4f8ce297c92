// Copies between an offloaded optimizer's float32 masters (host) and the
// model's device weights: the updated masters go to the device on a
// CopyEngine, so that the copies overlap the updates that follow. Where the
// device stores bf16 (bf16 weight storage, SplitBuffers) the masters are first
// rounded on the host, to nearest even as the products would round them, a slot
// of at most kWriteBackSlotElements at a time into one of two staging slots
// (WriteBackStagingBuffer, optimizer_footprint.h): a slot is refilled once
// its last copy is done, while the other slot's copy runs.
#ifndef PLATEAU_ENGINE_OPTIM_MASTER_COPIES_H_
#define PLATEAU_ENGINE_OPTIM_MASTER_COPIES_H_

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/memory/copy_engine.h"
#include "engine/memory/tensor.h"
#include "engine/model/split_buffers.h"
#include "kernels/ops.h"

namespace plateau::engine {

class MasterCopies {
 public:
  // device_ops: the weights' backend; host_ops: rounds on the host (a host
  // thread pool's CpuOps). The staging is made only when `weights` has a
  // bf16 buffer.
  static absl::StatusOr<std::unique_ptr<MasterCopies>> Create(
      const SplitBuffers& weights, kernels::Ops* device_ops,
      kernels::Ops* host_ops, AccountedAllocator* allocator);

  // Starts copying masters[0, elements) to the weights at (layout) offset
  // `offset`. The masters must stay unwritten until Wait.
  void Send(const float* masters, int64_t offset, int64_t elements);
  // Returns once every copy Send started is done.
  void Wait();
  // Waits, then copies the weights at `offset` to masters[0, elements),
  // widened where the device stores bf16.
  void Fetch(int64_t offset, int64_t elements, float* masters);

 private:
  MasterCopies(const SplitBuffers& weights, kernels::Ops* device_ops,
               kernels::Ops* host_ops);
  // Rounds and sends masters[0, elements) to bf16 weights at `offset`.
  void SendRounded(const float* masters, int64_t offset, int64_t elements);

  const SplitBuffers weights_;
  kernels::Ops* const device_ops_;
  kernels::Ops* const host_ops_;
  Tensor staging_;  // two slots, host, bf16; empty without bf16 weights
  std::array<CopyEngine::Ticket, 2> slot_copies_{};
  int next_slot_ = 0;
  CopyEngine::Ticket last_copy_ = 0;
  CopyEngine copies_;  // last: its thread stops before the buffers go
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_MASTER_COPIES_H_
