// OffloadStreamAdamW: AdamWOptimizer's steps with the state in the host pool
// (see adamw_optimizer.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/memory/dtype.h"
#include "engine/optim/adamw_optimizer.h"

namespace plateau::engine {

int64_t AdamWOptimizer::StagingElements() const {
  if (settings_.offload == OptimizerOffload::kSerial) return state_elements_;
  int64_t largest = 0;
  for (const Segment& bucket : Runs(settings_.bucket_elements)) {
    largest = std::max(largest, bucket.elements);
  }
  return kStagingSlots * largest;
}

void AdamWOptimizer::UpdateOnHost(
    const kernels::AdamWCoefficients& coefficients, const Segment& run,
    const float* gradients) {
  float* masters = master_weights_.f32() + run.state_offset;
  float* first = first_moment_.f32() + run.state_offset;
  float* second = second_moment_.f32() + run.state_offset;
  host_ops_->AdamWUpdate(coefficients, run.elements, masters, gradients, first,
                         second);
}

void AdamWOptimizer::StepSerial(
    const kernels::AdamWCoefficients& with_decay,
    const kernels::AdamWCoefficients& without_decay) {
  const std::vector<Segment> runs = Runs(state_elements_);
  CopyEngine::Ticket last = 0;
  for (const Segment& run : runs) {
    last = gradients_down_->ToHost(run.offset, run.elements,
                                   staging_.f32() + run.state_offset);
  }
  gradients_down_->Wait(last);
  for (const Segment& run : runs) {
    UpdateOnHost(run.decay ? with_decay : without_decay, run,
                 staging_.f32() + run.state_offset);
  }
  for (const Segment& run : runs) {
    weights_up_->Send(master_weights_.f32() + run.state_offset, run.offset,
                      run.elements);
  }
  weights_up_->Wait();
}

void AdamWOptimizer::StepStream(
    const kernels::AdamWCoefficients& with_decay,
    const kernels::AdamWCoefficients& without_decay) {
  const std::vector<Segment> buckets = Runs(settings_.bucket_elements);
  const int64_t slot_elements = staging_.elements() / kStagingSlots;
  auto slot = [&](size_t bucket) {
    return staging_.f32() + (bucket % kStagingSlots) * slot_elements;
  };
  auto copy_down = [&](size_t bucket) {
    return gradients_down_->ToHost(buckets[bucket].offset,
                                   buckets[bucket].elements, slot(bucket));
  };
  std::vector<CopyEngine::Ticket> down(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size() && b < kStagingSlots; ++b) {
    down[b] = copy_down(b);
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Segment& bucket = buckets[b];
    gradients_down_->Wait(down[b]);
    UpdateOnHost(bucket.decay ? with_decay : without_decay, bucket, slot(b));
    weights_up_->Send(master_weights_.f32() + bucket.state_offset,
                      bucket.offset, bucket.elements);
    // The slot is free again: the bucket two ahead copies into it.
    if (b + kStagingSlots < buckets.size()) {
      down[b + kStagingSlots] = copy_down(b + kStagingSlots);
    }
  }
  weights_up_->Wait();
}

}  // namespace plateau::engine
