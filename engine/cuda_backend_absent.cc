// cuda_backend.h in a build without the CUDA toolkit (bazel/cuda.bzl).
#include "engine/cuda_backend.h"
#include "kernels/cuda/device.h"

namespace plateau::engine {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions&) {
  // Always an error here: this build has no CUDA device.
  return kernels::cuda::RequireCudaDevice();
}

}  // namespace plateau::engine
