// Fused AdamW on a CUDA device: the same update as kernels/cpu/adamw.h, on
// device pointers, in one pass. Fails with FAILED_PRECONDITION ("no CUDA
// device: ...") on a machine without a usable GPU.
#ifndef PLATEAU_KERNELS_CUDA_ADAMW_H_
#define PLATEAU_KERNELS_CUDA_ADAMW_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/adamw.h"

namespace plateau::kernels::cuda {

// Runs on the default stream and waits for completion.
absl::Status AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                         float* params, const float* grads, float* first_moment,
                         float* second_moment);

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_ADAMW_H_
