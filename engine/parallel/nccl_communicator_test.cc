#include "engine/parallel/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"

namespace plateau::engine {
namespace {

using kernels::cuda::ListCudaDevices;

// Device copy of a host vector; copies back on request.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : count_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, bytes() + 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceVector() { cudaFree(data_); }
  T* data() { return static_cast<T*>(data_); }
  size_t bytes() const { return count_ * sizeof(T); }
  std::vector<T> ToHost() const {
    std::vector<T> host(count_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t count_;
  void* data_ = nullptr;
};

std::unique_ptr<NcclCommunicator> CreateSolo() {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto created =
      NcclCommunicator::Create(store, "solo", 0, 1, absl::Seconds(60));
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? std::move(*created) : nullptr;
}

// Without a GPU (these build machines) creation says so cleanly.
TEST(NcclCommunicatorTest, ReportsNoDeviceCleanlyWithoutGpu) {
  if (ListCudaDevices().ok()) GTEST_SKIP() << "a CUDA device is present";
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto created =
      NcclCommunicator::Create(store, "group", 0, 2, absl::Seconds(1));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(created.status().message().find("no CUDA device"),
            std::string::npos)
      << created.status();
}

// With one GPU only size-1 groups can run (NCCL refuses two ranks on the
// same device); they still go through NCCL's kernels.
TEST(NcclCommunicatorTest, SingleRankOpsOnDevice) {
  if (!ListCudaDevices().ok()) GTEST_SKIP() << ListCudaDevices().status();
  std::unique_ptr<NcclCommunicator> communicator = CreateSolo();
  ASSERT_NE(communicator, nullptr);
  EXPECT_EQ(communicator->rank(), 0);
  EXPECT_EQ(communicator->size(), 1);

  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  DeviceVector<float> floats(values);
  ASSERT_TRUE(communicator->AllReduceSum(floats.data(), 3).ok());
  EXPECT_EQ(floats.ToHost(), values);
  DeviceVector<double> doubles(std::vector<double>{1e300, -1.0});
  ASSERT_TRUE(communicator->AllReduceSum(doubles.data(), 2).ok());
  EXPECT_EQ(doubles.ToHost(), (std::vector<double>{1e300, -1.0}));

  DeviceVector<float> output(std::vector<float>(3, 0.0f));
  ASSERT_TRUE(
      communicator->ReduceScatterSum(floats.data(), output.data(), 3).ok());
  EXPECT_EQ(output.ToHost(), values);
  DeviceVector<float> gathered(std::vector<float>(3, 0.0f));
  ASSERT_TRUE(communicator->AllGather(floats.data(), gathered.data(), 3).ok());
  EXPECT_EQ(gathered.ToHost(), values);

  DeviceVector<char> send(std::vector<char>{'a', 'b', 'c'});
  DeviceVector<char> receive(std::vector<char>(3, '\0'));
  const std::vector<int64_t> sizes = {3};
  ASSERT_TRUE(
      communicator->AllToAllV(send.data(), sizes, receive.data(), sizes).ok());
  EXPECT_EQ(receive.ToHost(), (std::vector<char>{'a', 'b', 'c'}));
  const std::vector<int64_t> zero = {0};
  EXPECT_TRUE(communicator->AllToAllV(nullptr, zero, nullptr, zero).ok());

  EXPECT_TRUE(communicator->Barrier().ok());
  EXPECT_EQ(communicator->Send(send.data(), 3, 0, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, RepeatedAllReduceIsBitwiseStable) {
  if (!ListCudaDevices().ok()) GTEST_SKIP() << ListCudaDevices().status();
  std::unique_ptr<NcclCommunicator> communicator = CreateSolo();
  ASSERT_NE(communicator, nullptr);
  std::vector<float> values(100003);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0f / (i + 1);
  std::vector<float> first;
  for (int repetition = 0; repetition < 3; ++repetition) {
    DeviceVector<float> data(values);
    ASSERT_TRUE(communicator->AllReduceSum(data.data(), values.size()).ok());
    const std::vector<float> result = data.ToHost();
    if (repetition == 0) first = result;
    ASSERT_EQ(std::memcmp(result.data(), first.data(), result.size() * 4), 0);
  }
}

// Rank 1 never joins: rank 0's creation ends with DEADLINE_EXCEEDED after
// about the timeout instead of hanging in ncclCommInitRank.
TEST(NcclCommunicatorTest, MissingPeerTimesOutTheInit) {
  if (!ListCudaDevices().ok()) GTEST_SKIP() << ListCudaDevices().status();
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  const absl::Time start = absl::Now();
  auto created =
      NcclCommunicator::Create(store, "pair", 0, 2, absl::Seconds(3));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kDeadlineExceeded)
      << created.status();
  EXPECT_LE(absl::Now() - start, absl::Seconds(20));
}

TEST(NcclCommunicatorTest, MissingRankZeroTimesOutTheIdExchange) {
  if (!ListCudaDevices().ok()) GTEST_SKIP() << ListCudaDevices().status();
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto created =
      NcclCommunicator::Create(store, "pair", 1, 2, absl::Seconds(1));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kDeadlineExceeded)
      << created.status();
}

}  // namespace
}  // namespace plateau::engine
