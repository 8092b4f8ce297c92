// The CUDA backend (backend.h) on one device: CudaOps, device memory from
// cudaMalloc, host memory pinned (cudaHostAlloc) so that copies to and from
// it run at full speed on CudaOps' copy streams, overlapped with the kernels
// (SCO, the offloaded optimizers, checkpoints). A build without the CUDA
// toolkit has this header too; CreateCudaBackend then says so.
#ifndef PLATEAU_ENGINE_CUDA_BACKEND_H_
#define PLATEAU_ENGINE_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "kernels/cuda/matmul_precision.h"

namespace plateau::engine {

struct CudaBackendOptions {
  int device = 0;
  kernels::cuda::MatmulPrecision matmul_precision =
      kernels::cuda::MatmulPrecision::kTensorFloat32;
  // The device pool's capacity; 0 for all the device allows
  // (kernels::cuda::CudaDevicePoolBytes). More than that is refused.
  int64_t device_memory_bytes = 0;
};

// FAILED_PRECONDITION "no CUDA device: ..." without a GPU; INVALID_ARGUMENT
// for a device the runtime does not have or a capacity it cannot give.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_CUDA_BACKEND_H_
