// The CUDA backend's memory: the device pool's bytes are what the driver
// sees the process take (cudaMemGetInfo), the host pool is pinned, kernel
// scratch is accounted, and a pool the device cannot hold is refused. Built
// twice: on a GPU and emulated.
#include "engine/cuda_backend.h"

#include <iostream>
#include <vector>

#include "engine/memory/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/device.h"

namespace plateau::engine {
namespace {

using kernels::cuda::QueryCudaMemory;
using kernels::cuda::RequireCudaDevice;

TEST(CudaBackendTest, ReportsNoDeviceCleanlyWithoutGpu) {
  if (RequireCudaDevice().ok()) GTEST_SKIP() << "a CUDA device is present";
  const absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateCudaBackend(CudaBackendOptions());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(backend.status().message().find("no CUDA device"),
            std::string::npos)
      << backend.status();
}

class CudaBackendDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status device = RequireCudaDevice();
    if (!device.ok()) GTEST_SKIP() << device;
  }
};

// cudaMalloc rounds blocks up (to 2 MiB pages for large ones): the driver's
// count may exceed the pool's by that much per block.
constexpr int64_t kRoundingBytesPerBlock = int64_t{2} << 20;

TEST_F(CudaBackendDeviceTest, ThePoolsBytesAreWhatTheDriverSees) {
  CudaBackendOptions options;
  options.device_memory_bytes = int64_t{4} << 30;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  AccountedAllocator& allocator = (*backend)->allocator();
  EXPECT_EQ(allocator.capacity_bytes(MemoryPool::kDevice),
            options.device_memory_bytes);
  const int64_t used_before = QueryCudaMemory(0)->used_bytes();
  // For the log: what the CUDA context and cuBLAS take outside the pool.
  std::cout << "device memory in use before the pool holds anything: "
            << (used_before >> 20) << " MiB\n";
  const int64_t pool_before = allocator.reserved_bytes(MemoryPool::kDevice);
  std::vector<Tensor> tensors;
  for (const int64_t elements :
       {int64_t{1} << 24, int64_t{3} << 24, int64_t{12345}}) {
    absl::StatusOr<Tensor> tensor =
        Tensor::Create(allocator, MemoryPool::kDevice,
                       MemoryComponent::kActivations, {elements});
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    tensors.push_back(*std::move(tensor));
  }
  const int64_t pool_grew =
      allocator.reserved_bytes(MemoryPool::kDevice) - pool_before;
  const int64_t driver_grew = QueryCudaMemory(0)->used_bytes() - used_before;
  EXPECT_EQ(pool_grew, ((int64_t{4} << 24) + 12345) * 4);
  // A small block may land in a page the driver already held (on an H200
  // the 12,345 floats took no new memory).
  EXPECT_GE(driver_grew, pool_grew - kRoundingBytesPerBlock);
  EXPECT_LE(driver_grew, pool_grew + 3 * kRoundingBytesPerBlock);
  // Freed blocks stay cached (no cudaFree per step) until released.
  tensors.clear();
  EXPECT_EQ(QueryCudaMemory(0)->used_bytes() - used_before, driver_grew);
  allocator.ReleaseCache();
  EXPECT_LE(QueryCudaMemory(0)->used_bytes() - used_before,
            kRoundingBytesPerBlock);
}

TEST_F(CudaBackendDeviceTest, HostMemoryIsPinnedAndScratchIsAccounted) {
  CudaBackendOptions options;
  options.device_memory_bytes = int64_t{1} << 30;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<Tensor> host =
      Tensor::Create((*backend)->allocator(), MemoryPool::kHost,
                     MemoryComponent::kStaging, {1000});
  ASSERT_TRUE(host.ok()) << host.status();
  cudaPointerAttributes attributes;
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, host->f32()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  // A reduction takes its partials from the kernel scratch arena.
  absl::StatusOr<Tensor> x =
      Tensor::Create((*backend)->allocator(), MemoryPool::kDevice,
                     MemoryComponent::kActivations, {1 << 20});
  ASSERT_TRUE(x.ok());
  (*backend)->ops().Fill(1 << 20, 0.5f, x->f32());
  EXPECT_EQ((*backend)->ops().Sum(1 << 20, x->f32()), 0.5 * (1 << 20));
  EXPECT_EQ((*backend)
                ->allocator()
                .Usage(MemoryPool::kDevice, MemoryComponent::kOther)
                .current_bytes,
            int64_t{1} << 20);
  EXPECT_TRUE((*backend)->ops().status().ok());
}

TEST_F(CudaBackendDeviceTest, APoolTheDeviceCannotHoldIsRefused) {
  const std::vector<kernels::cuda::CudaDeviceInfo> devices =
      *kernels::cuda::ListCudaDevices();
  CudaBackendOptions options;
  options.device_memory_bytes =
      kernels::cuda::CudaDevicePoolBytes(devices[0]) + 1;
  const absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateCudaBackend(options);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.status().message().find("for the CUDA context"),
            std::string::npos)
      << backend.status();
  options.device = static_cast<int>(devices.size());
  options.device_memory_bytes = 0;
  EXPECT_EQ(CreateCudaBackend(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::engine
