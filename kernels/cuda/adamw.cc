#include "kernels/cuda/adamw.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda/adamw_launch.h"
#include "kernels/cuda/device.h"

namespace plateau::kernels::cuda {

absl::Status AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                         float* params, const float* grads, float* first_moment,
                         float* second_moment) {
  absl::Status status = RequireCudaDevice();
  if (!status.ok()) return status;
  status = CudaStatus(LaunchAdamWUpdate(coefficients, count, params, grads,
                                        first_moment, second_moment, nullptr),
                      "AdamW kernel launch");
  if (!status.ok()) return status;
  return CudaStatus(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
}

}  // namespace plateau::kernels::cuda
