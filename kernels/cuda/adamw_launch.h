// Launcher of the fused AdamW CUDA kernel (kernels/adamw.h). Pointers are
// device memory. Returns the launch error; plain CUDA types so that nvcc need
// not see abseil.
#ifndef PLATEAU_KERNELS_CUDA_ADAMW_LAUNCH_H_
#define PLATEAU_KERNELS_CUDA_ADAMW_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/adamw.h"

namespace plateau::kernels::cuda {

cudaError_t LaunchAdamWUpdate(const AdamWCoefficients& coefficients,
                              int64_t count, float* params, const float* grads,
                              float* first_moment, float* second_moment,
                              cudaStream_t stream);

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_ADAMW_LAUNCH_H_
