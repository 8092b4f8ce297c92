#include "engine/optim/zero_shards.h"

#include "common/status_macros.h"

namespace plateau::engine {

ZeroShards::ZeroShards(const ParameterLayout& layout, Communicator* dense_group,
                       Communicator* expert_group) {
  regions_.push_back({0, layout.dense_elements(), dense_group});
  regions_.push_back({layout.dense_elements(),
                      layout.total_elements() - layout.dense_elements(),
                      expert_group});
  for (const Region& region : regions_) {
    if (region.elements == 0) continue;
    owned_.push_back(
        {region.shard_begin(), region.shard_begin() + region.shard_elements()});
  }
}

absl::Status ZeroShards::ReduceGradients(Tensor& gradients, kernels::Ops& ops,
                                         AccountedAllocator& allocator) const {
  for (const Region& region : regions_) {
    if (region.size() == 1 || region.elements == 0) continue;
    ASSIGN_OR_RETURN(
        Tensor shard,
        Tensor::Create(allocator, MemoryPool::kDevice,
                       MemoryComponent::kGradients, {region.shard_elements()}));
    RETURN_IF_ERROR(region.group->ReduceScatterSum(
        gradients.f32() + region.begin, shard.f32(), region.shard_elements()));
    ops.Copy(region.shard_elements(), shard.f32(),
             gradients.f32() + region.shard_begin());
  }
  return absl::OkStatus();
}

double ZeroShards::OwnedSumOfSquares(const Tensor& values,
                                     kernels::Ops& ops) const {
  double sum = 0.0;
  for (const OwnedRange& range : owned_) {
    sum +=
        ops.SumOfSquares(range.end - range.begin, values.f32() + range.begin);
  }
  return sum;
}

void ZeroShards::ScaleOwned(Tensor& values, float factor,
                            kernels::Ops& ops) const {
  for (const OwnedRange& range : owned_) {
    ops.Scale(range.end - range.begin, factor, values.f32() + range.begin);
  }
}

absl::Status ZeroShards::GatherWeights(Tensor& weights, kernels::Ops& ops,
                                       AccountedAllocator& allocator) const {
  for (const Region& region : regions_) {
    if (region.size() == 1 || region.elements == 0) continue;
    // The gather writes the whole region, own shard included: send a copy.
    ASSIGN_OR_RETURN(
        Tensor shard,
        Tensor::Create(allocator, MemoryPool::kDevice,
                       MemoryComponent::kStaging, {region.shard_elements()}));
    ops.Copy(region.shard_elements(), weights.f32() + region.shard_begin(),
             shard.f32());
    RETURN_IF_ERROR(region.group->AllGather(
        shard.f32(), weights.f32() + region.begin, region.shard_elements()));
  }
  return absl::OkStatus();
}

}  // namespace plateau::engine
