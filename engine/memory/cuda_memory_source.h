// The CUDA backend's memory sources (memory_source.h): device memory from
// cudaMalloc on one device, and pinned host memory from cudaHostAlloc, which
// copies to and from the device run at full speed and asynchronously to.
// Sources do no accounting; the AccountedAllocator over them does, and
// caches their blocks, so cudaMalloc runs only while shapes are new.
#ifndef PLATEAU_ENGINE_MEMORY_CUDA_MEMORY_SOURCE_H_
#define PLATEAU_ENGINE_MEMORY_CUDA_MEMORY_SOURCE_H_

#include <cstddef>

#include "engine/memory/memory_source.h"

namespace plateau::engine {

class CudaDeviceMemorySource final : public MemorySource {
 public:
  explicit CudaDeviceMemorySource(int device) : device_(device) {}
  void* Allocate(size_t bytes) override;
  void Free(void* data, size_t bytes) override;

 private:
  const int device_;
};

class PinnedHostMemorySource final : public MemorySource {
 public:
  void* Allocate(size_t bytes) override;
  void Free(void* data, size_t bytes) override;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_CUDA_MEMORY_SOURCE_H_
