#include "engine/optim/zero_shards.h"

#include <algorithm>
#include <optional>

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

absl::Status ZeroShards::ReduceGradients(const SplitBuffers& gradients,
                                         kernels::Ops& ops,
                                         AccountedAllocator& allocator) const {
  for (size_t r = 0; r < regions_.size(); ++r) {
    const ZeroRegion& region = regions_[r];
    if (region.group_size == 1 || region.elements == 0) continue;
    ASSIGN_OR_RETURN(Tensor buffer,
                     Tensor::Create(allocator, ReduceScatterBuffer(region)));
    const int64_t shard = region.shard_elements();
    if (region.gradients_dtype == DType::kFloat32) {
      RETURN_IF_ERROR(groups_[r]->ReduceScatterSum(
          gradients.Float32At(region.begin), buffer.f32(), shard));
      ops.Copy(shard, buffer.f32(), gradients.Float32At(region.shard_begin()));
      continue;
    }
    // Each rank's part of a chunk of the shards, widened side by side, then
    // the chunk's sums.
    const int64_t chunk = buffer.elements() / (region.group_size + 1);
    float* widened = buffer.f32();
    float* sums = widened + region.group_size * chunk;
    for (int64_t done = 0; done < shard; done += chunk) {
      const int64_t count = std::min(chunk, shard - done);
      for (int rank = 0; rank < region.group_size; ++rank) {
        ops.CopyFromBf16(count,
                         gradients.Bf16At(region.begin + rank * shard + done),
                         widened + rank * count);
      }
      RETURN_IF_ERROR(groups_[r]->ReduceScatterSum(widened, sums, count));
      ops.CopyToBf16(count, sums,
                     gradients.Bf16At(region.shard_begin() + done));
    }
  }
  return absl::OkStatus();
}

template <typename Visit>
absl::Status ZeroShards::ForEachOwnedFloat32(const SplitBuffers& gradients,
                                             bool write_back, kernels::Ops& ops,
                                             AccountedAllocator& allocator,
                                             Visit visit) const {
  Tensor chunk;
  if (const std::optional<BufferSpec> spec =
          OwnedGradientChunkBuffer(regions_)) {
    ASSIGN_OR_RETURN(chunk, Tensor::Create(allocator, *spec));
  }
  for (const ZeroRegion& region : regions_) {
    const int64_t elements = region.shard_elements();
    if (elements == 0) continue;
    const int64_t begin = region.shard_begin();
    if (region.gradients_dtype == DType::kFloat32) {
      visit(elements, gradients.Float32At(begin));
      continue;
    }
    for (int64_t done = 0; done < elements; done += chunk.elements()) {
      const int64_t count = std::min(chunk.elements(), elements - done);
      uint16_t* stored = gradients.Bf16At(begin + done);
      ops.CopyFromBf16(count, stored, chunk.f32());
      visit(count, chunk.f32());
      if (write_back) ops.CopyToBf16(count, chunk.f32(), stored);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ZeroShards::OwnedSumOfSquares(
    const SplitBuffers& gradients, kernels::Ops& ops,
    AccountedAllocator& allocator) const {
  double sum = 0.0;
  RETURN_IF_ERROR(ForEachOwnedFloat32(gradients, /*write_back=*/false, ops,
                                      allocator,
                                      [&](int64_t count, float* values) {
                                        sum += ops.SumOfSquares(count, values);
                                      }));
  return sum;
}

absl::Status ZeroShards::ScaleOwned(const SplitBuffers& gradients, float factor,
                                    kernels::Ops& ops,
                                    AccountedAllocator& allocator) const {
  return ForEachOwnedFloat32(
      gradients, /*write_back=*/true, ops, allocator,
      [&](int64_t count, float* values) { ops.Scale(count, factor, values); });
}

absl::Status ZeroShards::GatherWeights(const SplitBuffers& weights,
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
