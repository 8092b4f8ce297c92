// The CUDA emulation's promises (device.h, runtime_api.h, cublas_api.h):
// CUDA's semantics where kernels rely on them, and a crash or an error
// where code breaks CUDA's rules.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/device_code.cuh"

namespace plateau::kernels::cuda {
namespace {

class Device {
 public:
  explicit Device(size_t floats) : floats_(floats) {
    EXPECT_EQ(
        cudaMalloc(reinterpret_cast<void**>(&data_), floats * sizeof(float)),
        cudaSuccess);
  }
  ~Device() { cudaFree(data_); }
  float* get() { return data_; }
  std::vector<float> Read() const {
    std::vector<float> host(floats_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, floats_ * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t floats_;
  float* data_ = nullptr;
};

__global__ void WriteIndexKernel(int64_t count, float* out) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    out[i] = static_cast<float>(i);
  }
}

TEST(CudaEmulationTest, KernelsReachDeviceMemoryAndHostCodeCannot) {
  Device x(1000);
  PLATEAU_LAUNCH(WriteIndexKernel, 3, 64, nullptr)(int64_t{1000}, x.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> read = x.Read();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(read[i], i);
  EXPECT_DEATH(x.get()[0] = 1.0f, "");
}

TEST(CudaEmulationTest, AKernelWritingPastABufferEndsTheProcess) {
  Device x(63);
  EXPECT_DEATH(
      PLATEAU_LAUNCH(WriteIndexKernel, 1, 32, nullptr)(int64_t{64}, x.get()),
      "wrote past the end of a device block of 252 bytes");
}

__global__ void ShuffleKernel(float* out) {
  const int lane = threadIdx.x % 32;
  const float value = static_cast<float>(threadIdx.x);
  out[threadIdx.x * 4 + 0] = __shfl_xor_sync(kFullWarp, value, 5);
  out[threadIdx.x * 4 + 1] = __shfl_down_sync(kFullWarp, value, 3);
  out[threadIdx.x * 4 + 2] = __shfl_sync(kFullWarp, value, 7);
  out[threadIdx.x * 4 + 3] = WarpSum(static_cast<float>(lane));
}

TEST(CudaEmulationTest, ShufflesFollowCuda) {
  Device out(64 * 4);
  PLATEAU_LAUNCH(ShuffleKernel, 1, 64, nullptr)(out.get());
  const std::vector<float> read = out.Read();
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    const int warp_start = t - lane;
    EXPECT_EQ(read[t * 4 + 0], warp_start + (lane ^ 5)) << t;
    EXPECT_EQ(read[t * 4 + 1], lane + 3 < 32 ? t + 3 : t) << t;
    EXPECT_EQ(read[t * 4 + 2], warp_start + 7) << t;
    EXPECT_EQ(read[t * 4 + 3], 496.0f) << t;  // 0 + 1 + ... + 31
  }
}

// Each thread reads what its neighbour wrote to shared memory.
template <bool kSynchronize>
__global__ void NeighbourKernel(float base, float* out) {
  __shared__ float written[128];
  written[threadIdx.x] = static_cast<float>(threadIdx.x) + base;
  if (kSynchronize) __syncthreads();
  out[threadIdx.x] = written[(threadIdx.x + 1) % blockDim.x];
}

TEST(CudaEmulationTest, AMissingBarrierGivesWrongResults) {
  std::vector<float> expected(128);
  for (int t = 0; t < 128; ++t) expected[t] = (t + 1) % 128 + 1000.0f;
  Device out(128);
  PLATEAU_LAUNCH(NeighbourKernel<true>, 1, 128, nullptr)(1000.0f, out.get());
  EXPECT_EQ(out.Read(), expected);
  // The block's threads start in a shuffled order, so some read before
  // their neighbour wrote (and see the last launch's values).
  PLATEAU_LAUNCH(NeighbourKernel<false>, 1, 128, nullptr)(2000.0f, out.get());
  for (float& value : expected) value += 1000.0f;
  EXPECT_NE(out.Read(), expected);
}

__global__ void MismatchedBarrierKernel() {
  if (threadIdx.x == 0) {
    __syncwarp();
  } else {
    __syncthreads();
  }
}

TEST(CudaEmulationTest, BarriersThatCanNeverBePassedEndTheProcess) {
  EXPECT_DEATH(PLATEAU_LAUNCH(MismatchedBarrierKernel, 1, 64, nullptr)(),
               "can never pass its barriers");
}

TEST(CudaEmulationTest, GeometriesCudaRefusesAreErrors) {
  Device x(1);
  PLATEAU_LAUNCH(WriteIndexKernel, 1, 2048, nullptr)(int64_t{1}, x.get());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  PLATEAU_LAUNCH(WriteIndexKernel, dim3(1, 70000), 32, nullptr)
  (int64_t{1}, x.get());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

TEST(CudaEmulationTest, CopiesCheckWhereTheirBytesAre) {
  Device x(16);
  std::vector<float> host(16, 2.0f);
  EXPECT_EQ(cudaMemcpy(x.get(), host.data(), 64, cudaMemcpyHostToDevice),
            cudaSuccess);
  // Wrong direction, and past the end of the device buffer.
  EXPECT_EQ(cudaMemcpy(host.data(), x.get(), 64, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(x.get(), host.data(), 68, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  cudaPointerAttributes attributes;
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, x.get() + 3), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, host.data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);
  std::memset(pinned, 0, 64);  // host code may touch pinned memory
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, pinned), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST(CudaEmulationTest, AFailedCallLeavesItsErrorForCudaGetLastError) {
  void* block = nullptr;
  EXPECT_EQ(cudaMalloc(&block, size_t{1} << 62), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaEmulationTest, TheDeviceRunsOutOfMemoryAtItsSize) {
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  void* block = nullptr;
  EXPECT_EQ(cudaMalloc(&block, free_bytes + 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&block, 1 << 20), cudaSuccess);
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total_bytes), cudaSuccess);
  EXPECT_EQ(free_bytes - free_after, size_t{1} << 20);
  EXPECT_EQ(cudaFree(block), cudaSuccess);
}

TEST(CudaEmulationTest, CublasMultipliesColumnMajorAndChecksArguments) {
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  // Column-major A = [1 3; 2 4], B = [5 7; 6 8]: A B = [23 31; 34 46].
  Device a(4), b(4), c(4);
  const float a_host[] = {1, 2, 3, 4}, b_host[] = {5, 6, 7, 8};
  cudaMemcpy(a.get(), a_host, 16, cudaMemcpyHostToDevice);
  cudaMemcpy(b.get(), b_host, 16, cudaMemcpyHostToDevice);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(
      cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.get(),
                   CUDA_R_32F, 2, b.get(), CUDA_R_32F, 2, &zero, c.get(),
                   CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.Read(), (std::vector<float>{23, 34, 31, 46}));
  EXPECT_EQ(
      cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.get(),
                   CUDA_R_32F, 1, b.get(), CUDA_R_32F, 2, &zero, c.get(),
                   CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
}  // namespace plateau::kernels::cuda
