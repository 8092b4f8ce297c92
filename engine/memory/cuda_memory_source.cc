#include "engine/memory/cuda_memory_source.h"

#include "kernels/cuda/cuda_api.h"

namespace plateau::engine {

// A refused cudaMalloc is not a sticky error, but it stays the thread's
// last error: it is read here so that no later launch check reports it.
void* CudaDeviceMemorySource::Allocate(size_t bytes) {
  void* data = nullptr;
  if (cudaSetDevice(device_) != cudaSuccess ||
      cudaMalloc(&data, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return data;
}

// cudaFree waits for the device: no queued kernel still uses the block.
void CudaDeviceMemorySource::Free(void* data, size_t /*bytes*/) {
  cudaSetDevice(device_);
  cudaFree(data);
}

void* PinnedHostMemorySource::Allocate(size_t bytes) {
  void* data = nullptr;
  if (cudaHostAlloc(&data, bytes == 0 ? 1 : bytes, cudaHostAllocDefault) !=
      cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return data;
}

void PinnedHostMemorySource::Free(void* data, size_t /*bytes*/) {
  cudaFreeHost(data);
}

}  // namespace plateau::engine
