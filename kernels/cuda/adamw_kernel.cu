#include "kernels/cuda/adamw_launch.h"

namespace plateau::kernels::cuda {
namespace {

// One thread per element in a grid-stride loop; the update is memory-bound,
// so the only goal is fully coalesced loads and stores.
__global__ void AdamWKernel(AdamWCoefficients c, int64_t count, float* params,
                            const float* grads, float* m, float* v) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    const float g = grads[i];
    const float m_new = fmaf(c.beta1, m[i], c.one_minus_beta1 * g);
    const float v_new = fmaf(c.beta2, v[i], c.one_minus_beta2 * (g * g));
    const float denominator =
        fmaf(sqrtf(v_new), c.inverse_sqrt_correction2, c.epsilon);
    params[i] = fmaf(params[i], c.decay, -(c.step_size * m_new) / denominator);
    m[i] = m_new;
    v[i] = v_new;
  }
}

}  // namespace

cudaError_t LaunchAdamWUpdate(const AdamWCoefficients& coefficients,
                              int64_t count, float* params, const float* grads,
                              float* first_moment, float* second_moment,
                              cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 4096;
  const int64_t wanted = (count + kThreads - 1) / kThreads;
  const int blocks =
      static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  AdamWKernel<<<blocks, kThreads, 0, stream>>>(
      coefficients, count, params, grads, first_moment, second_moment);
  return cudaGetLastError();
}

}  // namespace plateau::kernels::cuda
