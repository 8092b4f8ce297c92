#include "kernels/cuda/adamw.h"

#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cuda/device.h"

namespace plateau::kernels::cuda {
namespace {

AdamWCoefficients TestCoefficients() {
  AdamWHyperparameters hyper;
  hyper.learning_rate = 1e-2f;
  hyper.weight_decay = 0.1f;
  hyper.step = 3;
  return ComputeAdamWCoefficients(hyper);
}

// Without a GPU (these build machines) the CUDA path must say so cleanly.
TEST(CudaAdamWTest, ReportsNoDeviceCleanlyWithoutGpu) {
  if (ListCudaDevices().ok()) GTEST_SKIP() << "a CUDA device is present";
  const absl::Status status =
      AdamWUpdate(TestCoefficients(), 16, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("no CUDA device"), std::string::npos)
      << status;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<float>& host) : count_(host.size()) {
    EXPECT_EQ(
        cudaMalloc(reinterpret_cast<void**>(&data_), count_ * sizeof(float)),
        cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), count_ * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  float* data() { return data_; }
  std::vector<float> ToHost() const {
    std::vector<float> host(count_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, count_ * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t count_;
  float* data_ = nullptr;
};

// With a GPU: the kernel agrees with its CPU twin.
TEST(CudaAdamWTest, MatchesCpuTwinOnDevice) {
  if (!ListCudaDevices().ok()) GTEST_SKIP() << ListCudaDevices().status();
  constexpr int64_t kCount = 100003;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> params(kCount), grads(kCount), m(kCount), v(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    params[i] = normal(rng);
    grads[i] = 0.1f * normal(rng);
    m[i] = 0.01f * normal(rng);
    v[i] = 1e-4f * std::abs(normal(rng));
  }
  DeviceBuffer device_params(params), device_grads(grads), device_m(m),
      device_v(v);
  ASSERT_TRUE(AdamWUpdate(TestCoefficients(), kCount, device_params.data(),
                          device_grads.data(), device_m.data(), device_v.data())
                  .ok());
  cpu::AdamWUpdate(TestCoefficients(), kCount, params.data(), grads.data(),
                   m.data(), v.data());
  const std::vector<float> result = device_params.ToHost();
  for (int64_t i = 0; i < kCount; ++i) {
    ASSERT_NEAR(result[i], params[i], 1e-6 + 1e-5 * std::abs(params[i])) << i;
  }
}

}  // namespace
}  // namespace plateau::kernels::cuda
