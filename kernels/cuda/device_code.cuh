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

// A launch's error is read with cudaGetLastError, which also returns what
// an earlier runtime call left behind without being an error of its own
// (cudaErrorNotReady from a stream query, a refused cudaMalloc): every
// launcher forgets that first, so that its error is its own. (A kernel's
// fault is sticky: every later call returns it anyway.)
inline void ForgetStaleError() { static_cast<void>(cudaGetLastError()); }

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

// `op` over the warp, the same in every lane: a butterfly, whose every step
// combines the same two values in each pair of lanes (op is commutative).
template <typename T, typename Op>
__device__ __forceinline__ T WarpReduce(T value, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = op(value, __shfl_xor_sync(kFullWarp, value, offset));
  }
  return value;
}

template <typename T>
__device__ __forceinline__ T WarpSum(T value) {
  return WarpReduce(value, SumOp());
}

// `op` over the block, the same in every thread, in a fixed order (warps
// first, then the warps' results); `identity` fills in for missing warps.
// REQUIRES: every thread of the block calls it, and blockDim.x is a
// multiple of 32 (blockDim.y == blockDim.z == 1).
template <typename T, typename Op>
__device__ T BlockReduce(T value, T identity, Op op) {
  __shared__ T warp_results[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  value = WarpReduce(value, op);
  if (lane == 0) warp_results[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / 32;
  T total = lane < warps ? warp_results[lane] : identity;
  total = WarpReduce(total, op);
  // warp_results may be written again by the next call.
  __syncthreads();
  return total;
}

template <typename T>
__device__ T BlockSum(T value) {
  return BlockReduce(value, T(0), SumOp());
}

// `lowest` is the identity (-infinity).
template <typename T>
__device__ T BlockMax(T value, T lowest) {
  return BlockReduce(value, lowest, MaxOp());
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

// A float32 or bf16 input's value, as the kernels with a ...Bf16 form read
// it: the bf16 widened exactly.
__device__ __forceinline__ float ValueOf(float value) { return value; }
__device__ __forceinline__ float ValueOf(uint16_t value) {
  return DeviceBfloat16ToFloat(value);
}

// A kernel's float32 result, stored as float32 or as bf16 bits: the kernels
// with a ...ToBf16 form are templates over their output.
__device__ __forceinline__ void StoreAs(float value, float* out) {
  *out = value;
}
__device__ __forceinline__ void StoreAs(float value, uint16_t* out) {
  *out = DeviceFloatToBfloat16(value);
}

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_DEVICE_CODE_CUH_
