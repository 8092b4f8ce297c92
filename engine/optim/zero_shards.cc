#include "engine/optim/zero_shards.h"

#include "common/status_macros.h"

namespace plateau::engine {

namespace {

int SizeOf(const Communicator* group) {
  return group == nullptr ? 1 : group->size();
}
int RankOf(const Communicator* group) {
  return group == nullptr ? 0 : group->rank();
}

}  // namespace

ZeroShards::ZeroShards(const ParameterLayout& layout, Communicator* dense_group,
                       Communicator* expert_group)
    : regions_(ZeroRegionsOf(layout, SizeOf(dense_group), RankOf(dense_group),
                             SizeOf(expert_group), RankOf(expert_group))) {
  for (const ZeroRegion& region : regions_) {
    groups_.push_back(region.expert_group ? expert_group : dense_group);
  }
  owned_ = OwnedRangesOf(regions_);
}

absl::Status ZeroShards::ReduceGradients(Tensor& gradients, kernels::Ops& ops,
                                         AccountedAllocator& allocator) const {
  for (size_t r = 0; r < regions_.size(); ++r) {
    const ZeroRegion& region = regions_[r];
    if (region.group_size == 1 || region.elements == 0) continue;
    ASSIGN_OR_RETURN(Tensor shard,
                     Tensor::Create(allocator, ReduceScatterBuffer(region)));
    RETURN_IF_ERROR(groups_[r]->ReduceScatterSum(
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

absl::Status ZeroShards::GatherWeights(const WeightBuffers& weights,
                                       kernels::Ops& ops,
                                       AccountedAllocator& allocator) const {
  for (size_t r = 0; r < regions_.size(); ++r) {
    const ZeroRegion& region = regions_[r];
    if (region.group_size == 1 || region.elements == 0) continue;
    // The gather writes the whole region, own shard included: send a copy.
    ASSIGN_OR_RETURN(Tensor shard,
                     Tensor::Create(allocator, AllGatherBuffer(region)));
    const int64_t count = region.shard_elements();
    if (region.weights_dtype == DType::kBfloat16) {
      ops.CopyBf16(count, weights.Bf16At(region.shard_begin()), shard.bf16());
      RETURN_IF_ERROR(groups_[r]->AllGather(
          shard.bf16(), weights.Bf16At(region.begin), count));
      continue;
    }
    ops.Copy(count, weights.Float32At(region.shard_begin()), shard.f32());
    RETURN_IF_ERROR(groups_[r]->AllGather(
        shard.f32(), weights.Float32At(region.begin), count));
  }
  return absl::OkStatus();
}

}  // namespace plateau::engine
