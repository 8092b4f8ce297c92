// Where a pool's bytes come from: host RAM here; cudaMalloc and pinned host
// memory on the CUDA backend. Sources do no accounting; AccountedAllocator
// does.
#ifndef PLATEAU_ENGINE_MEMORY_MEMORY_SOURCE_H_
#define PLATEAU_ENGINE_MEMORY_MEMORY_SOURCE_H_

#include <cstddef>

namespace plateau::engine {

class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // nullptr when the system cannot provide the bytes.
  virtual void* Allocate(size_t bytes) = 0;
  // REQUIRES: `data` came from Allocate(bytes) of this source.
  virtual void Free(void* data, size_t bytes) = 0;
};

// 64-byte aligned host memory (a cache line; an AVX-512 register).
class HostMemorySource final : public MemorySource {
 public:
  void* Allocate(size_t bytes) override;
  void Free(void* data, size_t bytes) override;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_MEMORY_SOURCE_H_
