// What only the CUDA backend has: device discovery, TF32 products, the bf16
// products' staging, copies from other threads, recorded errors. Then the
// Ops conformance suite (kernels/ops_conformance.h) on CudaOps with float32
// products. Built twice
// (kernels/cuda/BUILD): on a GPU, and on the CPU emulation, where host code
// touching device memory crashes, so every array goes through the ops'
// copies.
#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/device.h"
#include "kernels/ops_conformance.h"

namespace plateau::kernels::cuda {
namespace {

using conformance::DeviceFloats;
using conformance::ExpectClose;
using conformance::Floats;
using conformance::OpsConformanceTest;
using conformance::RandomFloats;
using conformance::ToDoubles;

// Grows by cudaMalloc; what CudaOps gets from the engine's allocator.
class TestArena final : public ScratchArena {
 public:
  ~TestArena() override { cudaFree(data_); }
  absl::StatusOr<void*> Reserve(int64_t bytes) override {
    if (bytes > bytes_) {
      cudaFree(data_);
      data_ = nullptr;
      bytes_ = 0;
      if (cudaMalloc(&data_, static_cast<size_t>(bytes)) != cudaSuccess) {
        return absl::ResourceExhaustedError("test arena");
      }
      bytes_ = bytes;
    }
    return data_;
  }
  // The largest reservation so far.
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// CudaOps on device 0, its scratch and arrays from cudaMalloc.
class CudaBackend final : public conformance::ConformanceBackend {
 public:
  // FAILED_PRECONDITION where there is no CUDA device.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      MatmulPrecision precision) {
    if (absl::Status device = RequireCudaDevice(); !device.ok()) return device;
    auto backend = std::unique_ptr<CudaBackend>(new CudaBackend());
    CudaOpsOptions options;
    options.matmul_precision = precision;
    options.scratch = &backend->arena_;
    absl::StatusOr<std::unique_ptr<CudaOps>> ops = CudaOps::Create(options);
    if (!ops.ok()) return ops.status();
    backend->ops_ = *std::move(ops);
    return backend;
  }

  CudaOps& cuda() { return *ops_; }
  int64_t scratch_bytes() const { return arena_.bytes(); }
  Ops& ops() override { return *ops_; }
  void* AllocateDevice(int64_t bytes) override {
    void* data = nullptr;
    EXPECT_EQ(
        cudaMalloc(&data, static_cast<size_t>(std::max<int64_t>(1, bytes))),
        cudaSuccess);
    return data;
  }
  void FreeDevice(void* data) override { cudaFree(data); }
  absl::Status Finish() override { return ops_->Synchronize(); }

 private:
  CudaBackend() = default;

  TestArena arena_;  // outlives ops_, declared first
  std::unique_ptr<CudaOps> ops_;
};

INSTANTIATE_TEST_SUITE_P(
    Cuda, OpsConformanceTest,
    ::testing::Values(conformance::ConformanceBackendFactory{
        "float32",
        []() -> absl::StatusOr<
                 std::unique_ptr<conformance::ConformanceBackend>> {
          absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
              CudaBackend::Create(MatmulPrecision::kFloat32);
          if (!backend.ok()) return backend.status();
          return std::unique_ptr<conformance::ConformanceBackend>(
              *std::move(backend));
        }}),
    conformance::ConformanceBackendName);

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
        CudaBackend::Create(MatmulPrecision::kFloat32);
    if (absl::IsFailedPrecondition(backend.status())) {
      GTEST_SKIP() << backend.status();
    }
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    gpu_ = &backend_->cuda();
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      EXPECT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
    }
  }

  std::unique_ptr<CudaBackend> backend_;
  CudaOps* gpu_ = nullptr;  // backend_'s; null once a test broke it
};

TEST(CudaOpsCreateTest, ReportsNoDeviceCleanlyWithoutGpu) {
  if (RequireCudaDevice().ok()) GTEST_SKIP() << "a CUDA device is present";
  TestArena arena;
  CudaOpsOptions options;
  options.scratch = &arena;
  const absl::StatusOr<std::unique_ptr<CudaOps>> ops = CudaOps::Create(options);
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(ops.status().message().find("no CUDA device"), std::string::npos)
      << ops.status();
}

TEST_F(CudaOpsTest, RefusesAMissingDeviceIndex) {
  TestArena arena;
  CudaOpsOptions options;
  options.device = 4096;
  options.scratch = &arena;
  EXPECT_EQ(CudaOps::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A product of dense operands, op(a) [m, k] and op(b) [k, n], into a dense
// [m, n]; the pointers are the caller's to set.
GemmArgs DenseProduct(int64_t m, int64_t n, int64_t k, Transpose ta,
                      Transpose tb) {
  GemmArgs args;
  args.transpose_a = ta;
  args.transpose_b = tb;
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = ta == Transpose::kNo ? k : m;
  args.ldb = tb == Transpose::kNo ? n : k;
  args.ldc = n;
  return args;
}

// TensorFloat32 rounds the inputs to a 10-bit mantissa (to nearest or down):
// within 1e-2 of the float32 product; a mapping bug is off by far more.
TEST_F(CudaOpsTest, TensorFloat32ProductsAreCloseToFloat32Ones) {
  absl::StatusOr<std::unique_ptr<CudaBackend>> tf32 =
      CudaBackend::Create(MatmulPrecision::kTensorFloat32);
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  int seed = 1;
  for (const auto& [m, n, k] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {37, 29, 64}, {1, 130, 7}, {64, 1, 33}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        const GemmArgs args = DenseProduct(m, n, k, ta, tb);
        const Floats a = RandomFloats(m * k, seed += 3);
        const Floats b = RandomFloats(k * n, seed += 3);
        Floats products[2];
        CudaBackend* backends[2] = {backend_.get(), tf32->get()};
        for (int i = 0; i < 2; ++i) {
          DeviceFloats device_a(*backends[i], a), device_b(*backends[i], b),
              device_c(*backends[i], m * n);
          GemmArgs on_device = args;
          on_device.a = device_a.get();
          on_device.b = device_b.get();
          on_device.c = device_c.get();
          backends[i]->ops().Gemm(on_device);
          products[i] = device_c.Read();
        }
        ExpectClose(products[1], ToDoubles(products[0]), 1e-2, "TF32 Gemm");
      }
    }
  }
  EXPECT_TRUE((*tf32)->Finish().ok()) << (*tf32)->cuda().status();
}

// The bf16 products' copies of their float32 operands take the staging and
// no more, so the planner's prediction of it holds (MatmulStagingBytes):
// products whose copies would take 32 times that go in tiles.
TEST_F(CudaOpsTest, Bf16ProductsTakeTheStagingAndNoMore) {
  constexpr int64_t kStagingBytes = 16 << 10;
  int seed = 1;
  for (const auto& [m, n, k, ta, tb] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, Transpose, Transpose>>{
           {2000, 300, 64, Transpose::kNo, Transpose::kYes},
           {300, 2000, 64, Transpose::kYes, Transpose::kNo}}) {
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
        CudaBackend::Create(MatmulPrecision::kFloat32);
    ASSERT_TRUE(backend.ok()) << backend.status();
    (*backend)->cuda().SetMatmulStagingBytes(kStagingBytes);
    GemmArgs args = DenseProduct(m, n, k, ta, tb);
    args.precision = GemmPrecision::kBf16;
    DeviceFloats a(**backend, RandomFloats(m * k, seed += 3)),
        b(**backend, RandomFloats(k * n, seed += 3)), c(**backend, m * n);
    args.a = a.get();
    args.b = b.get();
    args.c = c.get();
    (*backend)->ops().Gemm(args);
    ASSERT_TRUE((*backend)->Finish().ok()) << (*backend)->cuda().status();
    EXPECT_EQ((*backend)->scratch_bytes(), kStagingBytes)
        << m << " x " << n << " x " << k << ": whole copies would take "
        << (m + n) * k * 2;
  }
}

// As the CopyEngine does: the copy runs on another thread, and sees the
// kernels queued before it.
TEST_F(CudaOpsTest, CopiesFromOtherThreadsSeeTheKernelsBeforeThem) {
  constexpr int64_t kCount = 50000;
  DeviceFloats x(*backend_, kCount);
  gpu_->Fill(kCount, 3.5f, x.get());
  Floats read(kCount);
  std::thread copier(
      [&] { gpu_->CopyToHost(kCount * 4, x.get(), read.data()); });
  copier.join();
  EXPECT_EQ(read, Floats(kCount, 3.5f));
}

// ---------------------------------------------------------------- errors

// A refused cudaMalloc leaves its error for cudaGetLastError (so does a
// stream query that finds work pending, after every NCCL wait): the next
// launch must not report it as its own.
TEST_F(CudaOpsTest, AnEarlierCallsErrorIsNotTakenForALaunchs) {
  DeviceFloats x(*backend_, 16);
  void* block = nullptr;
  ASSERT_NE(cudaMalloc(&block, size_t{1} << 62), cudaSuccess);
  gpu_->Fill(16, 1.0f, x.get());
  EXPECT_TRUE(gpu_->status().ok()) << gpu_->status();
  EXPECT_EQ(x.Read(), Floats(16, 1.0f));
}

TEST_F(CudaOpsTest, AFailedCallIsRecordedAndLaterCallsDoNothing) {
  DeviceFloats x(*backend_, Floats(64, 1.0f));
  GemmArgs bad;
  bad.m = 4;
  bad.n = 4;
  bad.k = 8;
  bad.a = x.get();
  bad.lda = 2;  // below k: cuBLAS refuses it
  bad.b = x.get();
  bad.ldb = 4;
  bad.c = x.get() + 32;
  bad.ldc = 4;
  gpu_->Gemm(bad);
  const absl::Status status = gpu_->status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("cublasGemmEx"), std::string::npos) << status;
  // Host outputs are zeros from now on, and nothing runs.
  EXPECT_EQ(gpu_->Sum(64, x.get()), 0.0);
  Floats read(64, 5.0f);
  gpu_->CopyToHost(64 * 4, x.get(), read.data());
  EXPECT_EQ(read, Floats(64, 0.0f));
  EXPECT_EQ(gpu_->Synchronize(), status);
  gpu_ = nullptr;  // TearDown expects a healthy backend
}

TEST_F(CudaOpsTest, AProductWrittenInBf16CannotAccumulate) {
  DeviceFloats x(*backend_, Floats(64, 1.0f));
  conformance::DeviceBf16s c(*backend_, 16);
  GemmArgs accumulating;
  accumulating.m = 4;
  accumulating.n = 4;
  accumulating.k = 8;
  accumulating.a = x.get();
  accumulating.lda = 8;
  accumulating.b = x.get();
  accumulating.ldb = 4;
  accumulating.c_bf16 = c.get();
  accumulating.ldc = 4;
  accumulating.beta = 1.0f;
  gpu_->Gemm(accumulating);
  const absl::Status status = gpu_->status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("GemmArgs::c_bf16"), std::string::npos)
      << status;
  gpu_ = nullptr;  // TearDown expects a healthy backend
}

}  // namespace
}  // namespace plateau::kernels::cuda
