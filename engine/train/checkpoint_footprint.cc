#include "engine/train/checkpoint_footprint.h"

#include <algorithm>

namespace plateau::engine {

CheckpointWeights CheckpointWeightsOf(int ep_index, int dp_index,
                                      bool from_masters) {
  return {dp_index == 0 && ep_index == 0, dp_index == 0, from_masters};
}

int64_t CheckpointWeightElements(const ParameterLayout& layout,
                                 const CheckpointWeights& weights,
                                 const std::vector<OwnedRange>& owned) {
  int64_t elements =
      weights.from_masters ? OwnedTrainedElements(layout, owned) : 0;
  for (const ParameterInfo& info : layout.parameters()) {
    if (weights.from_masters && TrainedByOptimizer(info)) continue;
    if (layout.SplitOverExpertRanks(info) ? weights.experts : weights.dense) {
      elements += info.elements;
    }
  }
  return elements;
}

BufferSpec DeviceBytesBuffer(int64_t bytes) {
  return DeviceBuffer(
      MemoryComponent::kStaging,
      {std::max<int64_t>(1, (bytes + kFloatBytes - 1) / kFloatBytes)});
}

int64_t CheckpointChunkElements(int64_t total) {
  return std::clamp<int64_t>(total, 1, kCheckpointChunkElements);
}

BufferSpec HostSnapshotBuffer(int64_t elements) {
  BufferSpec spec = DeviceBuffer(MemoryComponent::kStaging, {elements});
  spec.pool = MemoryPool::kHost;
  return spec;
}

FootprintSink::Handle GatherFootprint(
    bool gathers, int64_t own_elements,
    const std::vector<int64_t>& others_elements, int64_t whole_elements,
    FootprintSink& sink) {
  if (!gathers) {
    FootprintSink::Handle packed = sink.Allocate(
        DeviceBytesBuffer(CheckpointChunkElements(own_elements) * kFloatBytes));
    sink.Free(&packed);
    return 0;
  }
  const FootprintSink::Handle snapshot =
      sink.Allocate(HostSnapshotBuffer(whole_elements));
  for (const int64_t elements : others_elements) {
    FootprintSink::Handle packed = sink.Allocate(
        DeviceBytesBuffer(CheckpointChunkElements(elements) * kFloatBytes));
    sink.Free(&packed);
  }
  return snapshot;
}

}  // namespace plateau::engine
