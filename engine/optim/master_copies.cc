#include "engine/optim/master_copies.h"

#include <algorithm>

#include "common/status_macros.h"
#include "engine/memory/dtype.h"
#include "engine/optim/optimizer_footprint.h"

namespace plateau::engine {

MasterCopies::MasterCopies(const SplitBuffers& weights,
                           kernels::Ops* device_ops, kernels::Ops* host_ops)
    : weights_(weights),
      device_ops_(device_ops),
      host_ops_(host_ops),
      copies_(device_ops) {}

absl::StatusOr<std::unique_ptr<MasterCopies>> MasterCopies::Create(
    const SplitBuffers& weights, kernels::Ops* device_ops,
    kernels::Ops* host_ops, AccountedAllocator* allocator) {
  std::unique_ptr<MasterCopies> copies(
      new MasterCopies(weights, device_ops, host_ops));
  if (weights.bf16 != nullptr && !weights.bf16->empty()) {
    ASSIGN_OR_RETURN(copies->staging_,
                     Tensor::Create(*allocator, WriteBackStagingBuffer()));
  }
  return copies;
}

void MasterCopies::Send(const float* masters, int64_t offset,
                        int64_t elements) {
  // The part before the bf16 buffer, if any, goes as it is.
  const int64_t float32 =
      std::clamp<int64_t>(weights_.bf16_begin - offset, 0, elements);
  if (float32 > 0) {
    last_copy_ = copies_.FromHost(float32 * kFloatBytes, masters,
                                  weights_.Float32At(offset));
  }
  if (float32 < elements) {
    SendRounded(masters + float32, offset + float32, elements - float32);
  }
}

void MasterCopies::SendRounded(const float* masters, int64_t offset,
                               int64_t elements) {
  for (int64_t done = 0; done < elements; done += kWriteBackSlotElements) {
    const int64_t count = std::min(kWriteBackSlotElements, elements - done);
    const int slot = next_slot_;
    next_slot_ = 1 - next_slot_;
    copies_.Wait(slot_copies_[slot]);
    uint16_t* rounded = staging_.bf16() + slot * kWriteBackSlotElements;
    host_ops_->CopyToBf16(count, masters + done, rounded);
    slot_copies_[slot] = last_copy_ = copies_.FromHost(
        count * kBfloat16Bytes, rounded, weights_.Bf16At(offset + done));
  }
}

void MasterCopies::Wait() { copies_.Wait(last_copy_); }

void MasterCopies::Fetch(int64_t offset, int64_t elements, float* masters) {
  Wait();
  const int64_t float32 =
      std::clamp<int64_t>(weights_.bf16_begin - offset, 0, elements);
  if (float32 > 0) {
    device_ops_->CopyToHost(float32 * kFloatBytes, weights_.Float32At(offset),
                            masters);
  }
  uint16_t* bits = staging_.bf16();
  for (int64_t done = float32; done < elements;
       done += kWriteBackSlotElements) {
    const int64_t count = std::min(kWriteBackSlotElements, elements - done);
    device_ops_->CopyToHost(count * kBfloat16Bytes,
                            weights_.Bf16At(offset + done), bits);
    host_ops_->CopyFromBf16(count, bits, masters + done);
  }
}

}  // namespace plateau::engine
