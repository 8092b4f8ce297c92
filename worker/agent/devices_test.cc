#include "worker/agent/devices.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::worker {
namespace {

using kernels::cuda::CudaDeviceInfo;
using testing::HasSubstr;

using CudaList = absl::StatusOr<std::vector<CudaDeviceInfo>>;

const CudaList kNoDriver = absl::FailedPreconditionError(
    "no CUDA device: cudaGetDeviceCount returned cudaErrorInsufficientDriver");

CudaList TwoGpus() {
  std::vector<CudaDeviceInfo> devices(2);
  for (int i = 0; i < 2; ++i) {
    devices[i].index = i;
    devices[i].name = "NVIDIA H200";
    devices[i].memory_bytes = int64_t{140} << 30;
  }
  return devices;
}

TEST(DevicesTest, CpuDevicesHaveTheGivenMemory) {
  auto offered = DevicesOf("cpu:3", 1 << 20, TwoGpus());
  ASSERT_TRUE(offered.ok()) << offered.status();
  ASSERT_EQ(offered->devices.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(offered->devices[i].index(), i);
    EXPECT_EQ(offered->devices[i].kind(), v1::DEVICE_KIND_CPU);
    EXPECT_EQ(offered->devices[i].memory_bytes(), 1 << 20);
  }
}

TEST(DevicesTest, CudaDevicesOfferTheirPool) {
  for (const char* flag : {"cuda", "auto"}) {
    auto offered = DevicesOf(flag, 1 << 20, TwoGpus());
    ASSERT_TRUE(offered.ok()) << offered.status();
    ASSERT_EQ(offered->devices.size(), 2u);
    EXPECT_EQ(offered->devices[1].index(), 1);
    EXPECT_EQ(offered->devices[1].kind(), v1::DEVICE_KIND_CUDA);
    EXPECT_EQ(offered->devices[1].model(), "NVIDIA H200");
    EXPECT_EQ(offered->devices[1].memory_bytes(),
              (int64_t{140} << 30) - kernels::cuda::kCudaReservedBytes);
    EXPECT_THAT(offered->summary, HasSubstr("2 cuda device(s)"));
  }
}

TEST(DevicesTest, AutoWithoutAGpuOffersOneCpuDeviceAndSaysWhy) {
  auto offered = DevicesOf("auto", 1 << 20, kNoDriver);
  ASSERT_TRUE(offered.ok()) << offered.status();
  ASSERT_EQ(offered->devices.size(), 1u);
  EXPECT_EQ(offered->devices[0].kind(), v1::DEVICE_KIND_CPU);
  EXPECT_THAT(offered->summary, HasSubstr("cudaErrorInsufficientDriver"));
}

// This machine's own answer: without a GPU, or in a build without the CUDA
// toolkit (kernels/cuda/device_absent.cc), auto offers one CPU device and
// says why.
TEST(DevicesTest, AutoOnThisMachineWithoutAGpuFallsBackSayingWhy) {
  const CudaList found = kernels::cuda::ListCudaDevices();
  if (found.ok()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
  auto offered = DevicesOf("auto", 1 << 20, found);
  ASSERT_TRUE(offered.ok()) << offered.status();
  ASSERT_EQ(offered->devices.size(), 1u);
  EXPECT_EQ(offered->devices[0].kind(), v1::DEVICE_KIND_CPU);
  EXPECT_THAT(offered->summary, HasSubstr("no CUDA device"));
  EXPECT_THAT(DevicesOf("cuda", 1 << 20, found).status().message(),
              HasSubstr(found.status().message()));
}

TEST(DevicesTest, CudaWithoutAGpuIsRefusedSayingWhy) {
  auto offered = DevicesOf("cuda", 1 << 20, kNoDriver);
  EXPECT_EQ(offered.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(offered.status().message(),
              HasSubstr("cudaErrorInsufficientDriver"));
  EXPECT_THAT(offered.status().message(), HasSubstr("--devices cpu:N"));
}

TEST(DevicesTest, BadFormsAreRefusedNamingTheFlag) {
  for (const char* flag : {"cpu", "cpu:0", "cpu:x", "gpu:2", "cpu:2000"}) {
    auto offered = DevicesOf(flag, 1 << 20, TwoGpus());
    EXPECT_EQ(offered.status().code(), absl::StatusCode::kInvalidArgument)
        << flag;
    EXPECT_THAT(offered.status().message(), HasSubstr("--devices"));
  }
  EXPECT_EQ(DevicesOf("cpu:1", 0, kNoDriver).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::worker
