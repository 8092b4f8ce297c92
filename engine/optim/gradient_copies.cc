#include "engine/optim/gradient_copies.h"

#include <algorithm>

#include "common/status_macros.h"
#include "engine/memory/dtype.h"
#include "engine/optim/optimizer_footprint.h"

namespace plateau::engine {

GradientCopies::GradientCopies(const SplitBuffers& gradients,
                               kernels::Ops* device_ops)
    : gradients_(gradients), copies_(device_ops) {}

absl::StatusOr<std::unique_ptr<GradientCopies>> GradientCopies::Create(
    const SplitBuffers& gradients, kernels::Ops* device_ops,
    AccountedAllocator* allocator) {
  std::unique_ptr<GradientCopies> copies(
      new GradientCopies(gradients, device_ops));
  if (gradients.bf16 != nullptr && !gradients.bf16->empty()) {
    ASSIGN_OR_RETURN(copies->staging_,
                     Tensor::Create(*allocator, GradientFetchStagingBuffer()));
  }
  return copies;
}

CopyEngine::Ticket GradientCopies::ToHost(int64_t offset, int64_t elements,
                                          float* host) {
  // The part before the bf16 buffer, if any, goes as it is.
  const int64_t float32 =
      std::clamp<int64_t>(gradients_.bf16_begin - offset, 0, elements);
  CopyEngine::Ticket last = 0;
  if (float32 > 0) {
    last = copies_.ToHost(float32 * kFloatBytes, gradients_.Float32At(offset),
                          host);
  }
  for (int64_t done = float32; done < elements;
       done += kGradientFetchSlotElements) {
    const int64_t count = std::min(kGradientFetchSlotElements, elements - done);
    last = copies_.ToHostWidened(count, gradients_.Bf16At(offset + done),
                                 staging_.bf16(), host + done);
  }
  return last;
}

void GradientCopies::Wait(CopyEngine::Ticket ticket) { copies_.Wait(ticket); }

}  // namespace plateau::engine
