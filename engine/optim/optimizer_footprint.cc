#include "engine/optim/optimizer_footprint.h"

#include <algorithm>

namespace plateau::engine {
namespace {

BufferSpec Flat(MemoryPool pool, MemoryComponent component, int64_t elements,
                DType dtype = DType::kFloat32) {
  BufferSpec spec = DeviceBuffer(component, {elements}, dtype);
  spec.pool = pool;
  return spec;
}

// Allocates `spec` unless it has no elements.
void AllocateKept(const BufferSpec& spec, FootprintSink& sink) {
  if (spec.elements() > 0) sink.Allocate(spec);
}

// The owned part of each parameter an optimizer updates, in buffer order.
template <typename Visit>
void ForEachOwnedPart(const ParameterLayout& layout,
                      const std::vector<OwnedRange>& owned, Visit visit) {
  for (const OwnedRange& range : owned) {
    for (const ParameterInfo& info : layout.parameters()) {
      if (!TrainedByOptimizer(info)) continue;
      const int64_t begin = std::max(range.begin, info.offset);
      const int64_t end = std::min(range.end, info.offset + info.elements);
      if (begin < end) visit(info, begin, end);
    }
  }
}

}  // namespace

OptimizerOffload OptimizerOffloadOf(v1::OptimizerOffload offload) {
  switch (offload) {
    case v1::OPTIMIZER_OFFLOAD_SERIAL:
      return OptimizerOffload::kSerial;
    case v1::OPTIMIZER_OFFLOAD_STREAM:
      return OptimizerOffload::kStream;
    default:
      return OptimizerOffload::kNone;
  }
}

std::vector<ZeroRegion> ZeroRegionsOf(const ParameterLayout& layout,
                                      int dense_group_size,
                                      int dense_group_index,
                                      int expert_group_size,
                                      int expert_group_index) {
  const DType products =
      layout.bf16_weight_storage() ? DType::kBfloat16 : DType::kFloat32;
  const DType product_gradients =
      layout.bf16_gradients() ? DType::kBfloat16 : DType::kFloat32;
  const int64_t dense_products = layout.dense_products_begin();
  return {
      {0, layout.bf16_begin(), dense_group_size, dense_group_index},
      {layout.bf16_begin(), dense_products - layout.bf16_begin(),
       dense_group_size, dense_group_index, /*expert_group=*/false, products,
       product_gradients},
      {dense_products, layout.dense_elements() - dense_products,
       dense_group_size, dense_group_index, /*expert_group=*/false, products,
       product_gradients},
      {layout.dense_elements(),
       layout.total_elements() - layout.dense_elements(), expert_group_size,
       expert_group_index, /*expert_group=*/true, products, product_gradients}};
}

std::vector<OwnedRange> OwnedRangesOf(const std::vector<ZeroRegion>& regions) {
  std::vector<OwnedRange> owned;
  for (const ZeroRegion& region : regions) {
    if (region.elements == 0) continue;
    owned.push_back(
        {region.shard_begin(), region.shard_begin() + region.shard_elements()});
  }
  return owned;
}

int64_t OwnedTrainedElements(const ParameterLayout& layout,
                             const std::vector<OwnedRange>& owned) {
  int64_t elements = 0;
  ForEachOwnedPart(layout, owned,
                   [&](const ParameterInfo&, int64_t begin, int64_t end) {
                     elements += end - begin;
                   });
  return elements;
}

BufferSpec ReduceScatterBuffer(const ZeroRegion& region) {
  if (region.gradients_dtype == DType::kBfloat16) {
    const int64_t chunk =
        std::min(region.shard_elements(), kGradientChunkElements);
    return DeviceBuffer(MemoryComponent::kGradients,
                        {(region.group_size + 1) * chunk});
  }
  return DeviceBuffer(MemoryComponent::kGradients, {region.shard_elements()});
}

std::optional<BufferSpec> OwnedGradientChunkBuffer(
    const std::vector<ZeroRegion>& regions) {
  int64_t largest = 0;
  for (const ZeroRegion& region : regions) {
    if (region.gradients_dtype == DType::kBfloat16) {
      largest = std::max(largest, region.shard_elements());
    }
  }
  if (largest == 0) return std::nullopt;
  return DeviceBuffer(MemoryComponent::kGradients,
                      {std::min(largest, kGradientChunkElements)});
}

BufferSpec AllGatherBuffer(const ZeroRegion& region) {
  return DeviceBuffer(MemoryComponent::kStaging, {region.shard_elements()},
                      region.weights_dtype);
}

void ReduceGradientsFootprint(const std::vector<ZeroRegion>& regions,
                              FootprintSink& sink) {
  for (const ZeroRegion& region : regions) {
    if (region.group_size == 1 || region.elements == 0) continue;
    FootprintSink::Handle shard = sink.Allocate(ReduceScatterBuffer(region));
    sink.Free(&shard);
  }
}

void OwnedGradientsFootprint(const std::vector<ZeroRegion>& regions,
                             FootprintSink& sink) {
  if (const std::optional<BufferSpec> chunk =
          OwnedGradientChunkBuffer(regions)) {
    FootprintSink::Handle handle = sink.Allocate(*chunk);
    sink.Free(&handle);
  }
}

void GatherWeightsFootprint(const std::vector<ZeroRegion>& regions,
                            FootprintSink& sink) {
  for (const ZeroRegion& region : regions) {
    if (region.group_size == 1 || region.elements == 0) continue;
    FootprintSink::Handle shard = sink.Allocate(AllGatherBuffer(region));
    sink.Free(&shard);
  }
}

BufferSpec WriteBackStagingBuffer() {
  return Flat(MemoryPool::kHost, MemoryComponent::kStaging,
              2 * kWriteBackSlotElements, DType::kBfloat16);
}

BufferSpec GradientFetchStagingBuffer() {
  return Flat(MemoryPool::kHost, MemoryComponent::kStaging,
              kGradientFetchSlotElements, DType::kBfloat16);
}

AdamWState AdamWState::For(const ParameterLayout& layout,
                           const std::vector<OwnedRange>& owned,
                           OptimizerOffload offload, int64_t bucket_elements) {
  AdamWState state;
  // The longest run of owned parameters contiguous in the buffers with the
  // same weight decay: the largest bucket the offloaded step streams.
  int64_t run = 0, run_end = -1, longest_run = 0;
  bool run_decay = false;
  ForEachOwnedPart(layout, owned,
                   [&](const ParameterInfo& info, int64_t begin, int64_t end) {
                     const int64_t elements = end - begin;
                     state.state_elements += elements;
                     const bool decay = info.role != ParameterRole::kNorm;
                     run = begin == run_end && decay == run_decay
                               ? run + elements
                               : elements;
                     run_end = end;
                     run_decay = decay;
                     longest_run = std::max(longest_run, run);
                   });
  const int64_t n = state.state_elements;
  constexpr MemoryComponent kOptimizer = MemoryComponent::kOptimizer;
  if (offload == OptimizerOffload::kNone) {
    state.first_moment = state.second_moment =
        Flat(MemoryPool::kDevice, kOptimizer, n);
    return state;
  }
  state.first_moment = state.second_moment =
      Flat(MemoryPool::kHost, kOptimizer, n);
  state.master_weights = Flat(MemoryPool::kHost, MemoryComponent::kWeights, n);
  const int64_t staging =
      offload == OptimizerOffload::kSerial
          ? n
          : kAdamWStagingSlots * std::min(bucket_elements, longest_run);
  state.staging = Flat(MemoryPool::kHost, MemoryComponent::kStaging,
                       std::max<int64_t>(1, staging));
  if (layout.bf16_weight_storage()) {
    state.write_back = WriteBackStagingBuffer();
  }
  if (layout.bf16_gradients()) {
    state.gradient_fetch = GradientFetchStagingBuffer();
  }
  return state;
}

TieredState TieredState::For(const ParameterLayout& layout,
                             const std::vector<OwnedRange>& owned,
                             TieredKind kind, MomentumStorage expert_momentum) {
  TieredState state;
  state.bf16_weight_storage = layout.bf16_weight_storage();
  state.bf16_gradients = layout.bf16_gradients();
  auto rule_of = [&](const ParameterInfo& info) {
    return TierRuleOf(kind, expert_momentum, info.role, info.global_shape);
  };
  ForEachOwnedPart(layout, owned,
                   [&](const ParameterInfo& info, int64_t begin, int64_t end) {
                     const int64_t elements = end - begin;
                     const TierRule rule = rule_of(info);
                     state.owned_elements += elements;
                     if (rule.momentum == MomentumStorage::kFloat32) {
                       state.momentum_float32 += elements;
                     } else if (rule.momentum == MomentumStorage::kBfloat16) {
                       state.momentum_bfloat16 += elements;
                     }
                     if (rule.second_moment && !rule.factored) {
                       state.exact_second_moment += elements;
                     }
                   });
  // Every matrix of this rank's parameters has its row and column
  // statistics, owned or not (tiered_optimizer.h's units).
  for (const ParameterInfo& info : layout.parameters()) {
    if (!TrainedByOptimizer(info)) continue;
    const TierRule rule = rule_of(info);
    if (!rule.second_moment || !rule.factored) continue;
    const std::vector<int64_t>& shape = info.global_shape;
    const int64_t rows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
    const int64_t columns = shape.back();
    const int64_t matrices =
        shape.size() > 2 ? info.elements / (rows * columns) : 1;
    const int group = info.role == ParameterRole::kExpert ? 1 : 0;
    state.statistics[group] += (rows + columns) * matrices;
  }
  return state;
}

TieredStateBuffers TieredStateBuffers::For(const TieredState& state,
                                           bool offloaded,
                                           const std::array<bool, 2>& grouped) {
  const MemoryPool pool = offloaded ? MemoryPool::kHost : MemoryPool::kDevice;
  constexpr MemoryComponent kOptimizer = MemoryComponent::kOptimizer;
  TieredStateBuffers buffers;
  buffers.momentum = Flat(pool, kOptimizer, state.momentum_float32);
  // bfloat16 buffers hold pairs: an even count.
  buffers.momentum_bfloat16 = Flat(
      pool, kOptimizer, state.momentum_bfloat16 + state.momentum_bfloat16 % 2,
      DType::kBfloat16);
  buffers.second_moment = Flat(pool, kOptimizer, state.exact_second_moment);
  for (int g = 0; g < 2; ++g) {
    buffers.statistics[g] = buffers.partial[g] =
        Flat(pool, kOptimizer, state.statistics[g]);
    buffers.transfer[g] =
        Flat(MemoryPool::kDevice, MemoryComponent::kStaging,
             offloaded && grouped[g] ? state.statistics[g] : 0);
  }
  const int64_t host = offloaded ? state.owned_elements : 0;
  buffers.master_weights =
      Flat(MemoryPool::kHost, MemoryComponent::kWeights, host);
  buffers.staging = Flat(MemoryPool::kHost, MemoryComponent::kStaging, host);
  if (offloaded && state.bf16_weight_storage) {
    buffers.write_back = WriteBackStagingBuffer();
  }
  if (offloaded && state.bf16_gradients) {
    buffers.gradient_fetch = GradientFetchStagingBuffer();
  }
  return buffers;
}

int64_t AdamWCheckpointElements(const AdamWState& state) {
  return 2 * state.state_elements;
}

int64_t TieredCheckpointElements(const TieredState& state,
                                 const std::array<bool, 2>& first_in_group) {
  int64_t elements = state.momentum_float32 + state.momentum_bfloat16 +
                     state.exact_second_moment;
  for (int g = 0; g < 2; ++g) {
    if (first_in_group[g]) elements += state.statistics[g];
  }
  return elements;
}

void AdamWSetUpFootprint(const AdamWState& state, FootprintSink& sink) {
  for (const BufferSpec* spec : {&state.first_moment, &state.second_moment,
                                 &state.master_weights, &state.staging}) {
    if (!spec->shape.empty()) sink.Allocate(*spec);
  }
  if (state.write_back) sink.Allocate(*state.write_back);
  if (state.gradient_fetch) sink.Allocate(*state.gradient_fetch);
}

void TieredSetUpFootprint(const TieredStateBuffers& buffers,
                          FootprintSink& sink) {
  AllocateKept(buffers.momentum, sink);
  AllocateKept(buffers.momentum_bfloat16, sink);
  AllocateKept(buffers.second_moment, sink);
  for (int g = 0; g < 2; ++g) {
    AllocateKept(buffers.statistics[g], sink);
    AllocateKept(buffers.partial[g], sink);
    AllocateKept(buffers.transfer[g], sink);
  }
  AllocateKept(buffers.master_weights, sink);
  AllocateKept(buffers.staging, sink);
  if (buffers.write_back) sink.Allocate(*buffers.write_back);
  if (buffers.gradient_fetch) sink.Allocate(*buffers.gradient_fetch);
}

}  // namespace plateau::engine
