// Copies an offloaded optimizer's gradients from the device to host float32
// on a CopyEngine, so that the copies overlap the updates. float32
// gradients go straight to their host destination; bf16 ones (bf16
// gradient accumulation, SplitBuffers) go down a slot of at most
// kGradientFetchSlotElements at a time into one host bf16 slot
// (GradientFetchStagingBuffer, optimizer_footprint.h) and are widened from
// there on the copy thread, which takes the copies one at a time, so the
// slot is free again for the next.
#ifndef PLATEAU_ENGINE_OPTIM_GRADIENT_COPIES_H_
#define PLATEAU_ENGINE_OPTIM_GRADIENT_COPIES_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/memory/copy_engine.h"
#include "engine/memory/tensor.h"
#include "engine/model/split_buffers.h"
#include "kernels/ops.h"

namespace plateau::engine {

class GradientCopies {
 public:
  // device_ops: the gradients' backend. The staging is made only when
  // `gradients` has a bf16 buffer.
  static absl::StatusOr<std::unique_ptr<GradientCopies>> Create(
      const SplitBuffers& gradients, kernels::Ops* device_ops,
      AccountedAllocator* allocator);

  // Starts copying the gradients at (layout) offset `offset` to
  // host[0, elements), widened where the device holds bf16; host must stay
  // unread until the returned ticket is waited for.
  CopyEngine::Ticket ToHost(int64_t offset, int64_t elements, float* host);
  // Returns once copy `ticket` and every copy started before it are done.
  void Wait(CopyEngine::Ticket ticket);

 private:
  GradientCopies(const SplitBuffers& gradients, kernels::Ops* device_ops);

  const SplitBuffers gradients_;
  Tensor staging_;     // one slot, host, bf16; empty without bf16 gradients
  CopyEngine copies_;  // last: its thread stops before the buffers go
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_GRADIENT_COPIES_H_
