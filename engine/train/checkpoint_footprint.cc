#include "engine/train/checkpoint_footprint.h"

#include <algorithm>

namespace plateau::engine {

int64_t OwnedWeightElements(const ParameterLayout& layout,
                            const std::vector<OwnedRange>& owned) {
  int64_t elements = 0;
  for (const OwnedRange& range : owned) {
    for (const ParameterInfo& info : layout.parameters()) {
      elements += std::max<int64_t>(
          0, std::min(range.end, info.offset + info.elements) -
                 std::max(range.begin, info.offset));
    }
  }
  return elements;
}

BufferSpec SnapshotBuffer(int64_t elements) {
  BufferSpec spec = DeviceBuffer(MemoryComponent::kSnapshot,
                                 {std::max<int64_t>(1, elements)});
  spec.pool = MemoryPool::kHost;
  return spec;
}

}  // namespace plateau::engine
