// Every CudaOps op against CpuOps (itself checked against float64 references
// in kernels/cpu/cpu_ops_test.cc) on the same random inputs, through device
// buffers only. Built twice (kernels/cuda/BUILD): on a GPU, and on the CPU
// emulation, where host code touching device memory crashes.
//
// Tolerances (relative to 1 + |expected|), float32 storage everywhere:
//   kFloat32 products, reductions, norms, softmaxes: 1e-5 to 2e-4 (other
//     summation orders, expf's ulps);
//   kTensorFloat32 products: 1e-2 (inputs rounded to a 10-bit mantissa,
//     whether to nearest or down; a mapping bug is off by far more);
//   bfloat16 momentum: one bfloat16 ulp (adjacent bit patterns);
//   integer outputs (top-k choice, expert layout) and the embedding's and
//   permutations' sums, whose order is the CPU's: exact.
#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/device.h"

namespace plateau::kernels::cuda {
namespace {

using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;

Floats RandomFloats(int64_t count, int seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Floats values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

Ints RandomInts(int64_t count, int32_t limit, int seed) {
  std::mt19937 rng(seed);
  Ints values(count);
  for (int32_t& value : values) value = static_cast<int32_t>(rng() % limit);
  return values;
}

void ExpectNear(const Floats& actual, const Floats& expected, double tolerance,
                const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i],
                tolerance * (1.0 + std::abs(expected[i])))
        << what << " at " << i;
  }
}

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

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// A device array, filled and read through the ops' copies only.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(CudaOps& ops, const std::vector<T>& host)
      : ops_(ops), count_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, bytes())), cudaSuccess);
    ops_.CopyFromHost(bytes(), host.data(), data_);
  }
  DeviceArray(CudaOps& ops, size_t count)
      : DeviceArray(ops, std::vector<T>(count)) {}
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return static_cast<T*>(data_); }
  std::vector<T> Read() const {
    std::vector<T> host(count_);
    ops_.CopyToHost(bytes(), data_, host.data());
    return host;
  }

 private:
  int64_t bytes() const { return static_cast<int64_t>(count_ * sizeof(T)); }
  CudaOps& ops_;
  size_t count_;
  void* data_ = nullptr;
};

using DeviceFloats = DeviceArray<float>;
using DeviceInts = DeviceArray<int32_t>;

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status device = RequireCudaDevice();
    if (!device.ok()) GTEST_SKIP() << device;
    gpu_ = Make(MatmulPrecision::kFloat32);
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      EXPECT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
    }
  }

  std::unique_ptr<CudaOps> Make(MatmulPrecision precision) {
    CudaOpsOptions options;
    options.matmul_precision = precision;
    options.scratch = &arena_;
    absl::StatusOr<std::unique_ptr<CudaOps>> ops = CudaOps::Create(options);
    EXPECT_TRUE(ops.ok()) << ops.status();
    return ops.ok() ? *std::move(ops) : nullptr;
  }

  cpu::CpuOps cpu_{1};
  TestArena arena_;
  std::unique_ptr<CudaOps> gpu_;
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
  CudaOpsOptions options;
  options.device = 4096;
  options.scratch = &arena_;
  EXPECT_EQ(CudaOps::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- products

struct GemmCase {
  int64_t m, n, k;
  Transpose ta, tb;
};

// Runs one product on both backends (leading dimensions padded by 3).
void CheckGemm(CudaOps& gpu, cpu::CpuOps& cpu, const GemmCase& shape,
               double tolerance, int seed) {
  GemmArgs args;
  args.transpose_a = shape.ta;
  args.transpose_b = shape.tb;
  args.m = shape.m;
  args.n = shape.n;
  args.k = shape.k;
  args.alpha = 0.75f;
  args.beta = 0.5f;
  const int64_t a_rows = shape.ta == Transpose::kNo ? shape.m : shape.k;
  const int64_t a_columns = shape.ta == Transpose::kNo ? shape.k : shape.m;
  const int64_t b_rows = shape.tb == Transpose::kNo ? shape.k : shape.n;
  const int64_t b_columns = shape.tb == Transpose::kNo ? shape.n : shape.k;
  args.lda = a_columns + 3;
  args.ldb = b_columns + 3;
  args.ldc = shape.n + 3;
  const Floats a = RandomFloats(a_rows * args.lda, seed);
  const Floats b = RandomFloats(b_rows * args.ldb, seed + 1);
  Floats c = RandomFloats(shape.m * args.ldc, seed + 2);
  DeviceFloats device_a(gpu, a), device_b(gpu, b), device_c(gpu, c);
  GemmArgs on_device = args;
  on_device.a = device_a.get();
  on_device.b = device_b.get();
  on_device.c = device_c.get();
  gpu.Gemm(on_device);
  args.a = a.data();
  args.b = b.data();
  args.c = c.data();
  cpu.Gemm(args);
  ExpectNear(device_c.Read(), c, tolerance, "Gemm");
}

TEST_F(CudaOpsTest, GemmMatchesTheCpuInEveryLayout) {
  std::unique_ptr<CudaOps> tf32 = Make(MatmulPrecision::kTensorFloat32);
  int seed = 1;
  for (const auto& [m, n, k] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {37, 29, 64}, {1, 130, 7}, {64, 1, 33}, {5, 6, 0}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        CheckGemm(*gpu_, cpu_, {m, n, k, ta, tb}, 2e-5, seed += 3);
        CheckGemm(*tf32, cpu_, {m, n, k, ta, tb}, 1e-2, seed += 3);
      }
    }
  }
  EXPECT_TRUE(tf32->Synchronize().ok()) << tf32->status();
}

TEST_F(CudaOpsTest, GroupedGemmMatchesEachProductAlone) {
  // Experts of different sizes, an empty one, and mixed transposes.
  const std::vector<GemmCase> shapes = {
      {17, 24, 16, Transpose::kNo, Transpose::kYes},
      {0, 24, 16, Transpose::kNo, Transpose::kYes},
      {3, 24, 16, Transpose::kNo, Transpose::kYes},
      {16, 24, 9, Transpose::kYes, Transpose::kNo}};
  std::vector<Floats> a, b, c;
  std::vector<std::unique_ptr<DeviceFloats>> device_a, device_b, device_c;
  std::vector<GemmArgs> cpu_problems, gpu_problems;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const GemmCase& s = shapes[i];
    GemmArgs args;
    args.transpose_a = s.ta;
    args.transpose_b = s.tb;
    args.m = s.m;
    args.n = s.n;
    args.k = s.k;
    args.lda = s.ta == Transpose::kNo ? s.k : s.m;
    args.ldb = s.tb == Transpose::kNo ? s.n : s.k;
    args.ldc = s.n;
    args.beta = i % 2 == 0 ? 0.0f : 1.0f;
    a.push_back(RandomFloats(std::max<int64_t>(1, s.m * s.k), 10 + i));
    b.push_back(RandomFloats(s.k * s.n, 20 + i));
    c.push_back(RandomFloats(std::max<int64_t>(1, s.m * s.n), 30 + i));
    device_a.push_back(std::make_unique<DeviceFloats>(*gpu_, a.back()));
    device_b.push_back(std::make_unique<DeviceFloats>(*gpu_, b.back()));
    device_c.push_back(std::make_unique<DeviceFloats>(*gpu_, c.back()));
    GemmArgs on_device = args;
    on_device.a = device_a.back()->get();
    on_device.b = device_b.back()->get();
    on_device.c = device_c.back()->get();
    gpu_problems.push_back(on_device);
    args.a = a.back().data();
    args.b = b.back().data();
    args.c = c.back().data();
    cpu_problems.push_back(args);
  }
  gpu_->GroupedGemm(gpu_problems);
  cpu_.GroupedGemm(cpu_problems);
  for (size_t i = 0; i < shapes.size(); ++i) {
    ExpectNear(device_c[i]->Read(), c[i], 2e-5, "GroupedGemm");
  }
}

// ---------------------------------------------------------------- copies

TEST_F(CudaOpsTest, CopiesFromOtherThreadsSeeTheKernelsBeforeThem) {
  constexpr int64_t kCount = 50000;
  DeviceFloats x(*gpu_, kCount);
  gpu_->Fill(kCount, 3.5f, x.get());
  Floats read(kCount);
  // As the CopyEngine does: the copy runs on another thread.
  std::thread copier(
      [&] { gpu_->CopyToHost(kCount * 4, x.get(), read.data()); });
  copier.join();
  EXPECT_EQ(read, Floats(kCount, 3.5f));
}

// ---------------------------------------------------------------- elementwise

TEST_F(CudaOpsTest, ElementwiseOpsAndReductions) {
  constexpr int64_t kCount = 300001;  // several blocks, ragged
  const Floats a = RandomFloats(kCount, 1), b = RandomFloats(kCount, 2);
  DeviceFloats device_a(*gpu_, a), device_b(*gpu_, b), out(*gpu_, kCount);
  gpu_->Add(kCount, device_a.get(), device_b.get(), out.get());
  Floats sum(kCount);
  cpu_.Add(kCount, a.data(), b.data(), sum.data());
  ExpectNear(out.Read(), sum, 0.0, "Add");
  gpu_->Scale(kCount, -1.5f, out.get());
  cpu_.Scale(kCount, -1.5f, sum.data());
  ExpectNear(out.Read(), sum, 0.0, "Scale");
  gpu_->Copy(kCount, device_a.get(), out.get());
  ExpectNear(out.Read(), a, 0.0, "Copy");
  gpu_->Fill(7, 2.0f, out.get());
  EXPECT_EQ(out.Read()[6], 2.0f);
  EXPECT_EQ(out.Read()[7], a[7]);
  EXPECT_NEAR(gpu_->Sum(kCount, device_a.get()), cpu_.Sum(kCount, a.data()),
              1e-9 * kCount);
  EXPECT_NEAR(gpu_->SumOfSquares(kCount, device_a.get()),
              cpu_.SumOfSquares(kCount, a.data()), 1e-9 * kCount);
  Floats positive(kCount);
  for (int64_t i = 0; i < kCount; ++i) positive[i] = std::abs(a[i]);
  DeviceFloats device_positive(*gpu_, positive);
  gpu_->SquareRoots(kCount, 0.5f, device_positive.get(), out.get());
  Floats roots(kCount);
  cpu_.SquareRoots(kCount, 0.5f, positive.data(), roots.data());
  ExpectNear(out.Read(), roots, 1e-6, "SquareRoots");
}

TEST_F(CudaOpsTest, SumOfSquaresDoesNotOverflowFloat) {
  const Floats big(1000, 1e20f);
  DeviceFloats x(*gpu_, big);
  EXPECT_NEAR(gpu_->SumOfSquares(1000, x.get()) / 1e43, 1.0, 1e-6);
}

TEST_F(CudaOpsTest, ColumnSumsMatchOverManyRowParts) {
  constexpr int64_t kRows = 20000, kColumns = 9;
  const Floats x = RandomFloats(kRows * kColumns, 3);
  DeviceFloats device_x(*gpu_, x);
  std::vector<double> gpu_sums(kColumns), cpu_sums(kColumns);
  gpu_->ColumnSums(kRows, kColumns, device_x.get(), absl::MakeSpan(gpu_sums));
  cpu_.ColumnSums(kRows, kColumns, x.data(), absl::MakeSpan(cpu_sums));
  for (int64_t j = 0; j < kColumns; ++j) {
    EXPECT_NEAR(gpu_sums[j], cpu_sums[j], 1e-9) << j;
  }
}

// ---------------------------------------------------------------- embedding

TEST_F(CudaOpsTest, EmbeddingGathersAndAddsRepeatedIdsInTokenOrder) {
  // 5000 ids need two radix passes; 6000 tokens, two sort tiles; few
  // distinct ids in the first half, so ids repeat many times.
  constexpr int64_t kVocab = 5000, kTokens = 6000, kDim = 40;
  Ints ids = RandomInts(kTokens, kVocab, 4);
  for (int64_t t = 0; t < kTokens / 2; ++t) ids[t] %= 7;
  const Floats table = RandomFloats(kVocab * kDim, 5);
  const Floats dout = RandomFloats(kTokens * kDim, 6);
  Floats dtable = RandomFloats(kVocab * kDim, 7);
  DeviceInts device_ids(*gpu_, ids);
  DeviceFloats device_table(*gpu_, table), device_dout(*gpu_, dout),
      device_dtable(*gpu_, dtable), out(*gpu_, kTokens * kDim);
  gpu_->EmbeddingForward(kTokens, kDim, device_ids.get(), device_table.get(),
                         out.get());
  Floats expected(kTokens * kDim);
  cpu_.EmbeddingForward(kTokens, kDim, ids.data(), table.data(),
                        expected.data());
  ExpectNear(out.Read(), expected, 0.0, "EmbeddingForward");
  gpu_->EmbeddingBackward(kTokens, kDim, device_ids.get(), device_dout.get(),
                          device_dtable.get());
  cpu_.EmbeddingBackward(kTokens, kDim, ids.data(), dout.data(), dtable.data());
  ExpectNear(device_dtable.Read(), dtable, 0.0, "EmbeddingBackward");
}

// ---------------------------------------------------------------- norms

TEST_F(CudaOpsTest, RmsNormForwardAndBackward) {
  constexpr int64_t kRows = 300, kDim = 100;
  const Floats x = RandomFloats(kRows * kDim, 8),
               weight = RandomFloats(kDim, 9);
  const Floats dout = RandomFloats(kRows * kDim, 10);
  Floats dx = RandomFloats(kRows * kDim, 11), dweight = RandomFloats(kDim, 12);
  DeviceFloats device_x(*gpu_, x), device_weight(*gpu_, weight),
      device_dout(*gpu_, dout), device_dx(*gpu_, dx),
      device_dweight(*gpu_, dweight), out(*gpu_, kRows * kDim),
      inverse(*gpu_, kRows);
  gpu_->RmsNormForward(kRows, kDim, device_x.get(), device_weight.get(), 1e-5f,
                       out.get(), inverse.get());
  Floats expected(kRows * kDim), expected_inverse(kRows);
  cpu_.RmsNormForward(kRows, kDim, x.data(), weight.data(), 1e-5f,
                      expected.data(), expected_inverse.data());
  ExpectNear(out.Read(), expected, 1e-5, "RmsNormForward");
  ExpectNear(inverse.Read(), expected_inverse, 1e-5, "inverse_rms");
  gpu_->RmsNormBackward(kRows, kDim, device_x.get(), device_weight.get(),
                        inverse.get(), device_dout.get(), device_dx.get(),
                        device_dweight.get());
  cpu_.RmsNormBackward(kRows, kDim, x.data(), weight.data(),
                       expected_inverse.data(), dout.data(), dx.data(),
                       dweight.data());
  ExpectNear(device_dx.Read(), dx, 1e-5, "RmsNorm dx");
  ExpectNear(device_dweight.Read(), dweight, 1e-4, "RmsNorm dweight");
}

TEST_F(CudaOpsTest, RotaryForwardAndBackward) {
  constexpr int64_t kSeq = 37, kRows = 2 * kSeq, kHeads = 3, kHeadDim = 12;
  constexpr int64_t kStride = kHeads * kHeadDim + 5;
  const Floats x = RandomFloats(kRows * kStride, 13);
  DeviceFloats device_x(*gpu_, x);
  Floats expected = x;
  gpu_->RotaryForward(kRows, kSeq, kHeads, kHeadDim, kStride, device_x.get());
  cpu_.RotaryForward(kRows, kSeq, kHeads, kHeadDim, kStride, expected.data());
  ExpectNear(device_x.Read(), expected, 1e-6, "RotaryForward");
  gpu_->RotaryBackward(kRows, kSeq, kHeads, kHeadDim, kStride, device_x.get());
  ExpectNear(device_x.Read(), x, 1e-5, "RotaryBackward undoes it");
}

// ---------------------------------------------------------------- attention

TEST_F(CudaOpsTest, AttentionForwardAndBackward) {
  for (const int64_t head_dim : {16, 40}) {
    AttentionShape shape;
    shape.batch = 2;
    shape.seq_len = 45;
    shape.heads = 2;
    shape.head_dim = head_dim;
    const int64_t d = shape.heads * head_dim;
    const int64_t rows = shape.batch * shape.seq_len;
    // Packed [q | k | v] rows, as the attention block keeps them.
    const int64_t stride = 3 * d;
    const Floats qkv = RandomFloats(rows * stride, 14, 0.5f);
    const Floats dout = RandomFloats(rows * d, 15);
    DeviceFloats device_qkv(*gpu_, qkv), device_dout(*gpu_, dout),
        out(*gpu_, rows * d),
        lse(*gpu_, shape.batch * shape.heads * shape.seq_len),
        grads(*gpu_, rows * stride);
    const float* q = device_qkv.get();
    gpu_->AttentionForward(shape, q, q + d, q + 2 * d, stride, out.get(), d,
                           lse.get());
    Floats expected(rows * d),
        expected_lse(shape.batch * shape.heads * shape.seq_len);
    cpu_.AttentionForward(shape, qkv.data(), qkv.data() + d, qkv.data() + 2 * d,
                          stride, expected.data(), d, expected_lse.data());
    ExpectNear(out.Read(), expected, 2e-5, "AttentionForward");
    ExpectNear(lse.Read(), expected_lse, 2e-5, "logsumexp");
    float* g = grads.get();
    gpu_->AttentionBackward(shape, q, q + d, q + 2 * d, stride, out.get(),
                            device_dout.get(), d, lse.get(), g, g + d,
                            g + 2 * d);
    Floats expected_grads(rows * stride);
    float* e = expected_grads.data();
    cpu_.AttentionBackward(shape, qkv.data(), qkv.data() + d,
                           qkv.data() + 2 * d, stride, expected.data(),
                           dout.data(), d, expected_lse.data(), e, e + d,
                           e + 2 * d);
    ExpectNear(grads.Read(), expected_grads, 1e-4, "AttentionBackward");
  }
}

// ---------------------------------------------------------------- MoE

TEST_F(CudaOpsTest, SwiGluForwardAndBackward) {
  constexpr int64_t kCount = 5000;
  const Floats gate = RandomFloats(kCount, 16, 3.0f),
               up = RandomFloats(kCount, 17), dout = RandomFloats(kCount, 18);
  DeviceFloats device_gate(*gpu_, gate), device_up(*gpu_, up),
      device_dout(*gpu_, dout), out(*gpu_, kCount), dgate(*gpu_, kCount),
      dup(*gpu_, kCount);
  gpu_->SwiGluForward(kCount, device_gate.get(), device_up.get(), out.get());
  Floats expected(kCount), expected_dgate(kCount), expected_dup(kCount);
  cpu_.SwiGluForward(kCount, gate.data(), up.data(), expected.data());
  ExpectNear(out.Read(), expected, 1e-5, "SwiGluForward");
  gpu_->SwiGluBackward(kCount, device_gate.get(), device_up.get(),
                       device_dout.get(), dgate.get(), dup.get());
  cpu_.SwiGluBackward(kCount, gate.data(), up.data(), dout.data(),
                      expected_dgate.data(), expected_dup.data());
  ExpectNear(dgate.Read(), expected_dgate, 1e-5, "SwiGlu dgate");
  ExpectNear(dup.Read(), expected_dup, 1e-5, "SwiGlu dup");
}

TEST_F(CudaOpsTest, RouterForwardAndBackwardWithTies) {
  constexpr int64_t kTokens = 700, kExperts = 6, kTopK = 2;
  Floats logits = RandomFloats(kTokens * kExperts, 19);
  // Every tenth token has all-equal logits: ties go to the lower index.
  for (int64_t t = 0; t < kTokens; t += 10) {
    std::fill_n(logits.begin() + t * kExperts, kExperts, 0.25f);
  }
  const Floats dgates = RandomFloats(kTokens * kTopK, 20);
  const Floats per_expert = RandomFloats(kExperts, 21);
  DeviceFloats device_logits(*gpu_, logits), probs(*gpu_, kTokens * kExperts),
      gates(*gpu_, kTokens * kTopK), device_dgates(*gpu_, dgates),
      dlogits(*gpu_, kTokens * kExperts);
  DeviceInts index(*gpu_, kTokens * kTopK);
  gpu_->RouterForward(kTokens, kExperts, kTopK, device_logits.get(),
                      probs.get(), index.get(), gates.get());
  Floats expected_probs(kTokens * kExperts), expected_gates(kTokens * kTopK);
  Ints expected_index(kTokens * kTopK);
  cpu_.RouterForward(kTokens, kExperts, kTopK, logits.data(),
                     expected_probs.data(), expected_index.data(),
                     expected_gates.data());
  ExpectNear(probs.Read(), expected_probs, 1e-6, "router probs");
  EXPECT_EQ(index.Read(), expected_index);
  ExpectNear(gates.Read(), expected_gates, 1e-6, "gates");
  for (bool with_per_expert : {false, true}) {
    gpu_->RouterBackward(kTokens, kExperts, kTopK, probs.get(), index.get(),
                         gates.get(), device_dgates.get(),
                         with_per_expert ? absl::MakeConstSpan(per_expert)
                                         : absl::Span<const float>(),
                         dlogits.get());
    Floats expected(kTokens * kExperts);
    cpu_.RouterBackward(kTokens, kExperts, kTopK, expected_probs.data(),
                        expected_index.data(), expected_gates.data(),
                        dgates.data(),
                        with_per_expert ? absl::MakeConstSpan(per_expert)
                                        : absl::Span<const float>(),
                        expected.data());
    ExpectNear(dlogits.Read(), expected, 1e-5, "RouterBackward");
  }
}

// NaN logits (a diverged step) still route every token to real experts:
// nothing downstream indexes outside the expert bank.
TEST_F(CudaOpsTest, RouterPicksRealExpertsEvenFromNaNLogits) {
  constexpr int64_t kTokens = 3, kExperts = 5, kTopK = 2;
  Floats logits = RandomFloats(kTokens * kExperts, 19);
  logits[1] = std::nanf("");
  for (int64_t e = 0; e < kExperts; ++e) logits[kExperts + e] = std::nanf("");
  DeviceFloats device_logits(*gpu_, logits), probs(*gpu_, kTokens * kExperts),
      gates(*gpu_, kTokens * kTopK);
  DeviceInts index(*gpu_, kTokens * kTopK);
  gpu_->RouterForward(kTokens, kExperts, kTopK, device_logits.get(),
                      probs.get(), index.get(), gates.get());
  const Ints chosen = index.Read();
  for (size_t a = 0; a < chosen.size(); ++a) {
    EXPECT_GE(chosen[a], 0) << a;
    EXPECT_LT(chosen[a], kExperts) << a;
  }
  EXPECT_NE(chosen[0], chosen[1]);
}

TEST_F(CudaOpsTest, ExpertLayoutIsTheCpusStableOrder) {
  // 300 experts need two radix passes; 3 x 2000 assignments, two tiles.
  for (const int64_t experts : {1, 8, 300}) {
    constexpr int64_t kTokens = 3000, kTopK = 2;
    const Ints index = RandomInts(kTokens * kTopK, experts, 22);
    DeviceInts device_index(*gpu_, index), rows(*gpu_, kTokens * kTopK),
        tokens(*gpu_, kTokens * kTopK);
    std::vector<int64_t> offsets(experts + 1), expected_offsets(experts + 1);
    gpu_->ComputeExpertLayout(kTokens, experts, kTopK, device_index.get(),
                              rows.get(), tokens.get(),
                              absl::MakeSpan(offsets));
    Ints expected_rows(kTokens * kTopK), expected_tokens(kTokens * kTopK);
    cpu_.ComputeExpertLayout(kTokens, experts, kTopK, index.data(),
                             expected_rows.data(), expected_tokens.data(),
                             absl::MakeSpan(expected_offsets));
    EXPECT_EQ(offsets, expected_offsets) << experts;
    EXPECT_EQ(rows.Read(), expected_rows) << experts;
    EXPECT_EQ(tokens.Read(), expected_tokens) << experts;
  }
}

TEST_F(CudaOpsTest, GatherAndCombineSkipNegativeRows) {
  constexpr int64_t kTokens = 90, kTopK = 2, kDim = 33;
  constexpr int64_t kRows = kTokens * kTopK;
  // A permutation of the rows, every fifth assignment dropped (a chunk).
  Ints assignment_row(kRows);
  for (int64_t a = 0; a < kRows; ++a) {
    assignment_row[a] = a % 5 == 0 ? -1 : static_cast<int32_t>((a * 7) % kRows);
  }
  Ints row_token(kRows);
  for (int64_t a = 0; a < kRows; ++a) row_token[(a * 7) % kRows] = a / kTopK;
  const Floats x = RandomFloats(kTokens * kDim, 23),
               rows = RandomFloats(kRows * kDim, 24),
               gates = RandomFloats(kRows, 25),
               dout = RandomFloats(kTokens * kDim, 26);
  Floats dx = RandomFloats(kTokens * kDim, 27);
  DeviceInts device_assignment(*gpu_, assignment_row),
      device_row_token(*gpu_, row_token);
  DeviceFloats device_x(*gpu_, x), device_rows(*gpu_, rows),
      device_gates(*gpu_, gates), device_dout(*gpu_, dout),
      device_dx(*gpu_, dx), gathered(*gpu_, kRows * kDim),
      combined(*gpu_, kTokens * kDim), drows(*gpu_, kRows * kDim),
      dgates(*gpu_, kRows);
  gpu_->GatherRows(kRows, kDim, device_x.get(), device_row_token.get(),
                   gathered.get());
  Floats expected(kRows * kDim);
  cpu_.GatherRows(kRows, kDim, x.data(), row_token.data(), expected.data());
  ExpectNear(gathered.Read(), expected, 0.0, "GatherRows");
  gpu_->GatherRowsBackward(kTokens, kTopK, kDim, device_rows.get(),
                           device_assignment.get(), device_dx.get());
  cpu_.GatherRowsBackward(kTokens, kTopK, kDim, rows.data(),
                          assignment_row.data(), dx.data());
  ExpectNear(device_dx.Read(), dx, 0.0, "GatherRowsBackward");
  gpu_->CombineRows(kTokens, kTopK, kDim, device_rows.get(),
                    device_assignment.get(), device_gates.get(), device_x.get(),
                    combined.get());
  Floats expected_combined(kTokens * kDim);
  cpu_.CombineRows(kTokens, kTopK, kDim, rows.data(), assignment_row.data(),
                   gates.data(), x.data(), expected_combined.data());
  ExpectNear(combined.Read(), expected_combined, 1e-6, "CombineRows");
  // Combining in place over the residual.
  gpu_->CombineRows(kTokens, kTopK, kDim, device_rows.get(),
                    device_assignment.get(), device_gates.get(), device_x.get(),
                    device_x.get());
  ExpectNear(device_x.Read(), expected_combined, 1e-6, "CombineRows in place");
  Floats expected_drows = RandomFloats(kRows * kDim, 28);
  Floats expected_dgates = RandomFloats(kRows, 29);
  DeviceFloats untouched_drows(*gpu_, expected_drows),
      untouched_dgates(*gpu_, expected_dgates);
  gpu_->CombineRowsBackward(kTokens, kTopK, kDim, device_rows.get(),
                            device_assignment.get(), device_gates.get(),
                            device_dout.get(), untouched_drows.get(),
                            untouched_dgates.get());
  cpu_.CombineRowsBackward(kTokens, kTopK, kDim, rows.data(),
                           assignment_row.data(), gates.data(), dout.data(),
                           expected_drows.data(), expected_dgates.data());
  ExpectNear(untouched_drows.Read(), expected_drows, 0.0, "CombineRows drows");
  ExpectNear(untouched_dgates.Read(), expected_dgates, 1e-5,
             "CombineRows dgates");
}

// ----------------------------------------------------------------
// cross-entropy

TEST_F(CudaOpsTest, CrossEntropyWholeAndByBlocks) {
  constexpr int64_t kTokens = 50, kVocab = 1000, kBlock = 300;
  const Floats logits = RandomFloats(kTokens * kVocab, 30, 3.0f);
  const Ints targets = RandomInts(kTokens, kVocab, 31);
  DeviceFloats device_logits(*gpu_, logits), losses(*gpu_, kTokens),
      lse(*gpu_, kTokens);
  DeviceInts device_targets(*gpu_, targets);
  gpu_->CrossEntropyForward(kTokens, kVocab, device_logits.get(),
                            device_targets.get(), losses.get(), lse.get());
  Floats expected_losses(kTokens), expected_lse(kTokens);
  cpu_.CrossEntropyForward(kTokens, kVocab, logits.data(), targets.data(),
                           expected_losses.data(), expected_lse.data());
  ExpectNear(losses.Read(), expected_losses, 1e-5, "CrossEntropy losses");
  ExpectNear(lse.Read(), expected_lse, 1e-5, "CrossEntropy logsumexp");
  // The same by blocks of the vocabulary (the last one short), Ring-DTP's
  // online form.
  DeviceFloats running(*gpu_, Floats(kTokens, -INFINITY)),
      target_logits(*gpu_, Floats(kTokens, 0.0f));
  Floats cpu_running(kTokens, -INFINITY), cpu_targets(kTokens, 0.0f);
  for (int64_t begin = 0; begin < kVocab; begin += kBlock) {
    const int64_t block = std::min(kBlock, kVocab - begin);
    Floats columns(kTokens * block);
    for (int64_t t = 0; t < kTokens; ++t) {
      std::copy_n(logits.begin() + t * kVocab + begin, block,
                  columns.begin() + t * block);
    }
    DeviceFloats device_columns(*gpu_, columns);
    gpu_->CrossEntropyFoldBlock(kTokens, block, begin, device_columns.get(),
                                device_targets.get(), running.get(),
                                target_logits.get());
    cpu_.CrossEntropyFoldBlock(kTokens, block, begin, columns.data(),
                               targets.data(), cpu_running.data(),
                               cpu_targets.data());
    gpu_->CrossEntropyBackward(kTokens, block, begin, device_targets.get(),
                               lse.get(), 0.5f, device_columns.get());
    cpu_.CrossEntropyBackward(kTokens, block, begin, targets.data(),
                              expected_lse.data(), 0.5f, columns.data());
    ExpectNear(device_columns.Read(), columns, 1e-5, "CrossEntropyBackward");
  }
  ExpectNear(running.Read(), cpu_running, 1e-5, "folded logsumexp");
  ExpectNear(target_logits.Read(), cpu_targets, 0.0, "target logits");
}

// ---------------------------------------------------------------- optimizers

TEST_F(CudaOpsTest, AdamWMatchesTheCpu) {
  constexpr int64_t kCount = 100003;
  AdamWHyperparameters hyper;
  hyper.learning_rate = 1e-2f;
  hyper.weight_decay = 0.1f;
  hyper.step = 3;
  const AdamWCoefficients coefficients = ComputeAdamWCoefficients(hyper);
  Floats params = RandomFloats(kCount, 32), m = RandomFloats(kCount, 33, 0.01f),
         v(kCount);
  const Floats grads = RandomFloats(kCount, 34, 0.1f);
  for (int64_t i = 0; i < kCount; ++i) v[i] = 1e-4f * std::abs(params[i]);
  DeviceFloats device_params(*gpu_, params), device_grads(*gpu_, grads),
      device_m(*gpu_, m), device_v(*gpu_, v);
  gpu_->AdamWUpdate(coefficients, kCount, device_params.get(),
                    device_grads.get(), device_m.get(), device_v.get());
  cpu_.AdamWUpdate(coefficients, kCount, params.data(), grads.data(), m.data(),
                   v.data());
  ExpectNear(device_params.Read(), params, 1e-5, "AdamW params");
  ExpectNear(device_m.Read(), m, 1e-6, "AdamW m");
  ExpectNear(device_v.Read(), v, 1e-6, "AdamW v");
}

// One tensor's state for the tiered passes, on the host and the device.
struct TieredTensor {
  int64_t rows, columns;
  Floats params, grads, momentum, second_moment, row_roots, column_roots,
      row_sums, column_sums, row_statistics, column_statistics;
  std::vector<uint16_t> momentum_bfloat16;
};

TieredTensor MakeTensor(int64_t rows, int64_t columns, int seed) {
  TieredTensor t;
  t.rows = rows;
  t.columns = columns;
  const int64_t count = rows * columns;
  t.params = RandomFloats(count, seed);
  t.grads = RandomFloats(count, seed + 1, 0.1f);
  t.momentum = RandomFloats(count, seed + 2, 0.01f);
  t.second_moment = RandomFloats(count, seed + 3, 1e-3f);
  for (float& v : t.second_moment) v = std::abs(v);
  t.row_roots = RandomFloats(rows, seed + 4);
  t.column_roots = RandomFloats(columns, seed + 5);
  for (float& v : t.row_roots) v = 0.1f + std::abs(v);
  for (float& v : t.column_roots) v = 0.1f + std::abs(v);
  t.row_sums = RandomFloats(rows, seed + 6);
  t.column_sums = RandomFloats(columns, seed + 7);
  t.row_statistics = t.row_roots;
  t.column_statistics = t.column_roots;
  for (float m : t.momentum) t.momentum_bfloat16.push_back(FloatToBfloat16(m));
  return t;
}

// The same tensor's arrays on the device.
struct DeviceTensor {
  DeviceTensor(CudaOps& ops, const TieredTensor& t)
      : params(ops, t.params),
        grads(ops, t.grads),
        momentum(ops, t.momentum),
        second_moment(ops, t.second_moment),
        row_roots(ops, t.row_roots),
        column_roots(ops, t.column_roots),
        row_sums(ops, t.row_sums),
        column_sums(ops, t.column_sums),
        row_statistics(ops, t.row_statistics),
        column_statistics(ops, t.column_statistics),
        momentum_bfloat16(ops, t.momentum_bfloat16) {}
  DeviceFloats params, grads, momentum, second_moment, row_roots, column_roots,
      row_sums, column_sums, row_statistics, column_statistics;
  DeviceArray<uint16_t> momentum_bfloat16;
};

template <typename T>
T* Data(std::vector<T>& v) {
  return v.data();
}
template <typename T>
T* Data(DeviceArray<T>& v) {
  return v.get();
}

enum class Kind { kExact, kFactored, kFactoredBfloat16Momentum, kNoMomentum };

// Elements [begin, end) of the tensor as a slice of `kind`, pointing into
// the host arrays or the device ones.
template <typename Arrays>
TieredSlice SliceOf(Arrays& a, const TieredTensor& t, Kind kind, int64_t begin,
                    int64_t end, bool whole) {
  auto at = [](auto& array, int64_t offset) { return Data(array) + offset; };
  TieredSlice s;
  s.count = end - begin;
  s.params = at(a.params, begin);
  s.grads = at(a.grads, begin);
  s.decay = begin % 2 == 0;
  s.update_scale = 0.75f;
  s.second_moment_scale = 1.7f;
  s.first_element = begin;
  s.rows = t.rows;
  s.columns = t.columns;
  if (kind == Kind::kFactoredBfloat16Momentum) {
    s.momentum_bfloat16 = at(a.momentum_bfloat16, begin);
  } else if (kind != Kind::kNoMomentum) {
    s.momentum = at(a.momentum, begin);
  }
  if (kind == Kind::kExact) {
    s.second_moment = at(a.second_moment, begin);
  } else {
    s.row_roots = Data(a.row_roots);
    s.column_roots = Data(a.column_roots);
    s.row_sums = Data(a.row_sums);
    s.column_sums = Data(a.column_sums);
    if (whole) {
      s.row_statistics = Data(a.row_statistics);
      s.column_statistics = Data(a.column_statistics);
    }
  }
  return s;
}

void ExpectSameState(DeviceTensor& device, const TieredTensor& host,
                     double tolerance) {
  ExpectNear(device.params.Read(), host.params, tolerance, "params");
  ExpectNear(device.momentum.Read(), host.momentum, tolerance, "momentum");
  ExpectNear(device.second_moment.Read(), host.second_moment, tolerance,
             "second moment");
  ExpectNear(device.row_sums.Read(), host.row_sums, tolerance, "row sums");
  ExpectNear(device.column_sums.Read(), host.column_sums, tolerance,
             "column sums");
  ExpectNear(device.row_statistics.Read(), host.row_statistics, tolerance,
             "row statistics");
  ExpectNear(device.column_statistics.Read(), host.column_statistics, tolerance,
             "column statistics");
  // Rounding to bfloat16 can turn the backends' float differences (fused
  // multiply-adds or not) into one bfloat16 ulp: adjacent bit patterns.
  const std::vector<uint16_t> momentum = device.momentum_bfloat16.Read();
  for (size_t i = 0; i < momentum.size(); ++i) {
    ASSERT_LE(std::abs(int{momentum[i]} - int{host.momentum_bfloat16[i]}), 1)
        << "bfloat16 momentum at " << i;
  }
}

TieredCoefficients Coefficients() {
  return ComputeTieredCoefficients(1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f, 4);
}

TEST_F(CudaOpsTest, TieredPassesOverSlicesThatCutRows) {
  for (Kind kind : {Kind::kExact, Kind::kFactored,
                    Kind::kFactoredBfloat16Momentum, Kind::kNoMomentum}) {
    // Two tensors, the larger cut in three slices mid-row, one of them over
    // several pieces.
    TieredTensor small = MakeTensor(3, 5, 40), large = MakeTensor(170, 130, 50);
    DeviceTensor device_small(*gpu_, small), device_large(*gpu_, large);
    const int64_t cuts[] = {0, 77, 20000, large.rows * large.columns};
    std::vector<TieredSlice> host_slices = {
        SliceOf(small, small, kind, 0, 15, false)};
    std::vector<TieredSlice> device_slices = {
        SliceOf(device_small, small, kind, 0, 15, false)};
    for (int i = 0; i < 3; ++i) {
      host_slices.push_back(
          SliceOf(large, large, kind, cuts[i], cuts[i + 1], false));
      device_slices.push_back(
          SliceOf(device_large, large, kind, cuts[i], cuts[i + 1], false));
    }
    if (kind != Kind::kExact) {
      // The small tensor's sums, then each of the large one's slices alone
      // (slices sharing sums are not in one call).
      for (size_t i = 0; i < host_slices.size(); ++i) {
        gpu_->AccumulateSquares(absl::MakeConstSpan(&device_slices[i], 1));
        cpu_.AccumulateSquares(absl::MakeConstSpan(&host_slices[i], 1));
      }
    }
    std::vector<double> gpu_sums(host_slices.size()),
        cpu_sums(host_slices.size());
    gpu_->TieredMeasure(Coefficients(), device_slices,
                        absl::MakeSpan(gpu_sums));
    cpu_.TieredMeasure(Coefficients(), host_slices, absl::MakeSpan(cpu_sums));
    for (size_t i = 0; i < gpu_sums.size(); ++i) {
      EXPECT_NEAR(gpu_sums[i], cpu_sums[i], 1e-4 * (1 + cpu_sums[i])) << i;
    }
    gpu_->TieredApply(Coefficients(), device_slices);
    cpu_.TieredApply(Coefficients(), host_slices);
    ExpectSameState(device_small, small, 1e-4);
    ExpectSameState(device_large, large, 1e-4);
  }
}

TEST_F(CudaOpsTest, TieredUpdateOfWholeTensors) {
  for (Kind kind :
       {Kind::kExact, Kind::kFactored, Kind::kFactoredBfloat16Momentum}) {
    TieredTensor a = MakeTensor(40, 70, 60), b = MakeTensor(1, 300, 70);
    DeviceTensor device_a(*gpu_, a), device_b(*gpu_, b);
    const std::vector<TieredSlice> host_slices = {
        SliceOf(a, a, kind, 0, 40 * 70, true),
        SliceOf(b, b, kind, 0, 300, true)};
    const std::vector<TieredSlice> device_slices = {
        SliceOf(device_a, a, kind, 0, 40 * 70, true),
        SliceOf(device_b, b, kind, 0, 300, true)};
    // A clip threshold that clips: the update's rms is well above it.
    gpu_->TieredUpdate(Coefficients(), device_slices, 0.05f);
    cpu_.TieredUpdate(Coefficients(), host_slices, 0.05f);
    ExpectSameState(device_a, a, 1e-4);
    ExpectSameState(device_b, b, 1e-4);
  }
}

TEST_F(CudaOpsTest, LionMatchesTheCpu) {
  TieredTensor t = MakeTensor(100, 400, 80);
  DeviceTensor device(*gpu_, t);
  const std::vector<TieredSlice> host_slices = {
      SliceOf(t, t, Kind::kFactored, 0, 30000, false),
      SliceOf(t, t, Kind::kFactored, 30000, 40000, false)};
  const std::vector<TieredSlice> device_slices = {
      SliceOf(device, t, Kind::kFactored, 0, 30000, false),
      SliceOf(device, t, Kind::kFactored, 30000, 40000, false)};
  gpu_->LionUpdate(Coefficients(), device_slices);
  cpu_.LionUpdate(Coefficients(), host_slices);
  ExpectNear(device.params.Read(), t.params, 1e-6, "Lion params");
  ExpectNear(device.momentum.Read(), t.momentum, 1e-6, "Lion momentum");
}

// ---------------------------------------------------------------- errors

// A refused cudaMalloc leaves its error for cudaGetLastError (so does a
// stream query that finds work pending, after every NCCL wait): the next
// launch must not report it as its own.
TEST_F(CudaOpsTest, AnEarlierCallsErrorIsNotTakenForALaunchs) {
  DeviceFloats x(*gpu_, 16);
  void* block = nullptr;
  ASSERT_NE(cudaMalloc(&block, size_t{1} << 62), cudaSuccess);
  gpu_->Fill(16, 1.0f, x.get());
  EXPECT_TRUE(gpu_->status().ok()) << gpu_->status();
  EXPECT_EQ(x.Read(), Floats(16, 1.0f));
}

TEST_F(CudaOpsTest, AFailedCallIsRecordedAndLaterCallsDoNothing) {
  DeviceFloats x(*gpu_, Floats(64, 1.0f));
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
  gpu_.reset();  // TearDown expects a healthy backend
}

}  // namespace
}  // namespace plateau::kernels::cuda
