// What every kernel source (kernels/cuda/*.cu) starts from: the CUDA kernel
// language, real under nvcc or emulated on the CPU (PLATEAU_CUDA_EMULATION,
// kernels/cuda/emulation/device.h), and the few device helpers the kernels
// share. Kernels are launched as
//   PLATEAU_LAUNCH(Kernel, grid, block, stream)(arguments...);
// which is Kernel<<<grid, block, 0, stream>>>(arguments...) under nvcc.
#ifndef PLATEAU_KERNELS_CUDA_DEVICE_CODE_CUH_
#define PLATEAU_KERNELS_CUDA_DEVICE_CODE_CUH_

#include <cstdint>

#ifdef PLATEAU_CUDA_EMULATION
#include "kernels/cuda/emulation/device.h"
#define PLATEAU_LAUNCH(kernel, grid, block, stream) \
  PLATEAU_EMULATED_LAUNCH(kernel, grid, block, stream)
#else
#include <cuda_runtime.h>
#define PLATEAU_LAUNCH(kernel, grid, block, stream) \
  kernel<<<(grid), (block), 0, (stream)>>>
#endif

namespace plateau::kernels::cuda {

inline constexpr unsigned int kFullWarp = 0xffffffffu;

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// The sum over the warp, the same in every lane: a butterfly, whose every
// step adds the same two values in each pair of lanes.
template <typename T>
__device__ __forceinline__ T WarpSum(T value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullWarp, value, offset);
  }
  return value;
}

template <typename T>
__device__ __forceinline__ T WarpMax(T value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(kFullWarp, value, offset);
    value = other > value ? other : value;
  }
  return value;
}

// The sum over the block, the same in every thread, in a fixed order (warps
// first, then the warps' sums). REQUIRES: every thread of the block calls it,
// and blockDim.x is a multiple of 32 (blockDim.y == blockDim.z == 1).
template <typename T>
__device__ T BlockSum(T value) {
  __shared__ T warp_sums[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  value = WarpSum(value);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / 32;
  T total = lane < warps ? warp_sums[lane] : T(0);
  total = WarpSum(total);
  // warp_sums may be written again by the next call.
  __syncthreads();
  return total;
}

// As BlockSum, for the maximum; `lowest` is the identity (-infinity).
template <typename T>
__device__ T BlockMax(T value, T lowest) {
  __shared__ T warp_maxima[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  value = WarpMax(value);
  if (lane == 0) warp_maxima[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / 32;
  T total = lane < warps ? warp_maxima[lane] : lowest;
  total = WarpMax(total);
  __syncthreads();
  return total;
}

// bfloat16 as kernels/tiered_update.h rounds it (nearest even; NaN stays
// NaN), on the device.
__device__ __forceinline__ uint16_t DeviceFloatToBfloat16(float value) {
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__device__ __forceinline__ float DeviceBfloat16ToFloat(uint16_t value) {
  return __uint_as_float(static_cast<uint32_t>(value) << 16);
}

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_DEVICE_CODE_CUH_
