// The CUDA kernel language on the CPU: what kernels/cuda/*.cu use of it, for
// the emulated build (PLATEAU_CUDA_EMULATION, see kernels/cuda/BUILD), which
// runs the very kernels the GPU runs on machines without one.
//
// A launch runs its blocks one after another, in a shuffled order, on the
// launching host thread; a block's threads are fibers of that thread, also
// started in a shuffled order, each running until it finishes or waits at a
// barrier (__syncthreads, __syncwarp, a shuffle). So a kernel that relies on
// an order CUDA does not promise, or that misses a barrier, computes wrong
// results here as it would on a GPU. A barrier that can never be passed (some
// threads wait at __syncthreads, others of the block at a warp barrier) ends
// the process with a message naming the kernel's block.
//
// __shared__ variables are function-local statics of the host thread: one
// block runs at a time per thread, so they are what the block shares.
#ifndef PLATEAU_KERNELS_CUDA_EMULATION_DEVICE_H_
#define PLATEAU_KERNELS_CUDA_EMULATION_DEVICE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

#include "kernels/cuda/emulation/runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
};

namespace plateau::kernels::cuda::emulation {

// What the built-in variables of the running fiber hold.
struct ThreadState {
  uint3 thread_index;
  uint3 block_index;
  dim3 block_dim;
  dim3 grid_dim;
};

// REQUIRES: called from a kernel body (a fiber of RunGrid).
const ThreadState& CurrentThread();
void SyncThreads();
void SyncWarp();

enum class ShuffleMode { kIndex, kUp, kDown, kXor };
// The warp's exchange of one value of up to 8 bytes per lane.
uint64_t ShuffleBits(uint64_t bits, ShuffleMode mode, int argument, int width);

// Runs `body` as every thread of every block of the grid. Returns
// cudaErrorInvalidConfiguration (and sets the last error) for a geometry
// CUDA would refuse, without running anything.
cudaError_t RunGrid(dim3 grid, dim3 block, cudaStream_t stream,
                    const std::function<void()>& body);

template <typename... Parameters>
class Launcher {
 public:
  Launcher(void (*kernel)(Parameters...), dim3 grid, dim3 block,
           cudaStream_t stream)
      : kernel_(kernel), grid_(grid), block_(block), stream_(stream) {}

  template <typename... Arguments>
  void operator()(Arguments&&... arguments) const {
    auto kernel = kernel_;
    RunGrid(grid_, block_, stream_, [&] { kernel(arguments...); });
  }

 private:
  void (*kernel_)(Parameters...);
  dim3 grid_;
  dim3 block_;
  cudaStream_t stream_;
};

template <typename T>
T Shuffle(T value, ShuffleMode mode, int argument, int width) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles move 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = ShuffleBits(bits, mode, argument, width);
  T result;
  std::memcpy(&result, &bits, sizeof(T));
  return result;
}

}  // namespace plateau::kernels::cuda::emulation

#define threadIdx \
  (::plateau::kernels::cuda::emulation::CurrentThread().thread_index)
#define blockIdx \
  (::plateau::kernels::cuda::emulation::CurrentThread().block_index)
#define blockDim \
  (::plateau::kernels::cuda::emulation::CurrentThread().block_dim)
#define gridDim (::plateau::kernels::cuda::emulation::CurrentThread().grid_dim)

constexpr int warpSize = 32;

inline void __syncthreads() {
  ::plateau::kernels::cuda::emulation::SyncThreads();
}
inline void __syncwarp(unsigned int = 0xffffffffu) {
  ::plateau::kernels::cuda::emulation::SyncWarp();
}

template <typename T>
T __shfl_sync(unsigned int, T value, int source_lane, int width = warpSize) {
  return ::plateau::kernels::cuda::emulation::Shuffle(
      value, ::plateau::kernels::cuda::emulation::ShuffleMode::kIndex,
      source_lane, width);
}
template <typename T>
T __shfl_up_sync(unsigned int, T value, unsigned int delta,
                 int width = warpSize) {
  return ::plateau::kernels::cuda::emulation::Shuffle(
      value, ::plateau::kernels::cuda::emulation::ShuffleMode::kUp,
      static_cast<int>(delta), width);
}
template <typename T>
T __shfl_down_sync(unsigned int, T value, unsigned int delta,
                   int width = warpSize) {
  return ::plateau::kernels::cuda::emulation::Shuffle(
      value, ::plateau::kernels::cuda::emulation::ShuffleMode::kDown,
      static_cast<int>(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned int, T value, int lane_mask, int width = warpSize) {
  return ::plateau::kernels::cuda::emulation::Shuffle(
      value, ::plateau::kernels::cuda::emulation::ShuffleMode::kXor, lane_mask,
      width);
}

// Fibers of one host thread never run at the same time, so a plain
// read-modify-write is atomic among them.
inline int atomicAdd(int* address, int value) {
  const int old = *address;
  *address = old + value;
  return old;
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline unsigned int __float_as_uint(float x) {
  unsigned int bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}
inline float __uint_as_float(unsigned int bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// kernel<<<grid, block, 0, stream>>>(arguments) is written
// PLATEAU_LAUNCH(kernel, grid, block, stream)(arguments) (device_code.cuh).
#define PLATEAU_EMULATED_LAUNCH(kernel, grid, block, stream)               \
  ::plateau::kernels::cuda::emulation::Launcher((kernel), (grid), (block), \
                                                (stream))

#endif  // PLATEAU_KERNELS_CUDA_EMULATION_DEVICE_H_
