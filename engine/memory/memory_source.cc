#include "engine/memory/memory_source.h"

#include <cstdlib>

namespace plateau::engine {

void* HostMemorySource::Allocate(size_t bytes) {
  constexpr size_t kAlignment = 64;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
}

void HostMemorySource::Free(void* data, size_t /*bytes*/) { std::free(data); }

}  // namespace plateau::engine
