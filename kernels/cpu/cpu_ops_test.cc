// What only the CPU backend has: OpenBLAS loaded at run time, calls from
// several threads at once, and results bitwise independent of the thread
// count (the pooled optimizer passes against the single-threaded kernels).
// Then the Ops conformance suite (kernels/ops_conformance.h) on CpuOps with
// 1, 2 and 3 threads; BUILD runs this test at every SIMD level.
#include "kernels/cpu/cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/tiered_update.h"
#include "kernels/ops_conformance.h"

namespace plateau::kernels::cpu {
namespace {

using conformance::Floats;
using conformance::OpsConformanceTest;
using conformance::RandomFloats;

// CpuOps' device memory is host memory, aligned for the widest vectors.
class CpuBackend final : public conformance::ConformanceBackend {
 public:
  explicit CpuBackend(int threads) : ops_(threads) {}
  Ops& ops() override { return ops_; }
  void* AllocateDevice(int64_t bytes) override {
    const size_t alignment = 64;
    const size_t rounded =
        (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + alignment - 1) /
        alignment * alignment;
    return std::aligned_alloc(alignment, rounded);
  }
  void FreeDevice(void* data) override { std::free(data); }
  absl::Status Finish() override { return ops_.status(); }

 private:
  CpuOps ops_;
};

std::vector<conformance::ConformanceBackendFactory> CpuBackends() {
  std::vector<conformance::ConformanceBackendFactory> factories;
  for (const int threads : {1, 2, 3}) {
    factories.push_back(
        {std::to_string(threads) + "_threads",
         [threads]() -> absl::StatusOr<
                         std::unique_ptr<conformance::ConformanceBackend>> {
           return std::make_unique<CpuBackend>(threads);
         }});
  }
  return factories;
}

INSTANTIATE_TEST_SUITE_P(Cpu, OpsConformanceTest,
                         ::testing::ValuesIn(CpuBackends()),
                         conformance::ConformanceBackendName);

class CpuOpsTest : public ::testing::TestWithParam<int> {
 protected:
  CpuOpsTest() : ops_(GetParam()) {}
  CpuOps ops_;
};

// A device pool too full for a bf16 product's operand copies: the error is
// recorded (kernels/ops.h) with what was asked, and other calls still work.
TEST(CpuOpsBf16Test, AScratchArenaThatCannotHoldTheCopiesIsAnError) {
  class FullArena final : public ScratchArena {
   public:
    absl::StatusOr<void*> Reserve(int64_t /*bytes*/) override {
      return absl::ResourceExhaustedError("device pool full");
    }
  };
  FullArena arena;
  CpuOps ops(2, &arena);
  std::vector<float> a(8 * 4, 1.0f), b(4 * 8, 1.0f), c(8 * 8, 0.0f);
  GemmArgs args;
  args.m = 8;
  args.n = 8;
  args.k = 4;
  args.a = a.data();
  args.lda = 4;
  args.b = b.data();
  args.ldb = 8;
  args.c = c.data();
  args.ldc = 8;
  args.precision = GemmPrecision::kBf16;
  ops.Gemm(args);
  EXPECT_TRUE(absl::IsResourceExhausted(ops.status())) << ops.status();
  EXPECT_NE(ops.status().message().find("bf16 copies"), std::string::npos)
      << ops.status();
  args.precision = GemmPrecision::kFloat32;
  ops.Gemm(args);
  EXPECT_EQ(c[0], 4.0f);
}

// A bf16 product of the tests below: c [m, n], every leading dimension
// wider than its matrix by `padding`.
struct ProductShape {
  int64_t m, n, k;
  Transpose ta, tb;
  int64_t padding;
  float beta;
};

// The product's arguments, its operands and c left to the caller.
GemmArgs Bf16ArgsOf(const ProductShape& shape) {
  GemmArgs args;
  args.transpose_a = shape.ta;
  args.transpose_b = shape.tb;
  args.m = shape.m;
  args.n = shape.n;
  args.k = shape.k;
  args.beta = shape.beta;
  args.precision = GemmPrecision::kBf16;
  args.lda = (shape.ta == Transpose::kNo ? shape.k : shape.m) + shape.padding;
  args.ldb = (shape.tb == Transpose::kNo ? shape.n : shape.k) + shape.padding;
  args.ldc = shape.n + shape.padding;
  return args;
}

// The elements a, b and c of those arguments span.
int64_t AElements(const GemmArgs& args) {
  return (args.transpose_a == Transpose::kNo ? args.m : args.k) * args.lda;
}
int64_t BElements(const GemmArgs& args) {
  return (args.transpose_b == Transpose::kNo ? args.k : args.n) * args.ldb;
}
int64_t CElements(const GemmArgs& args) { return args.m * args.ldc; }

// With a staging far smaller than the operands, products go in many rounds
// of tiles, column blocks of c included (and a tile larger than the staging
// takes the room it needs): the same products as one round, within the
// accumulation's rounding.
TEST(CpuOpsBf16Test, ProductsLargerThanTheStagingGoInTiles) {
  for (const ProductShape& shape :
       {ProductShape{200, 300, 64, Transpose::kNo, Transpose::kYes, 5, 1.0f},
        ProductShape{50, 40, 500, Transpose::kYes, Transpose::kNo, 0, 0.0f},
        ProductShape{97, 33, 40, Transpose::kYes, Transpose::kYes, 3, 0.5f}}) {
    SCOPED_TRACE(testing::Message()
                 << shape.m << " x " << shape.n << " x " << shape.k);
    GemmArgs args = Bf16ArgsOf(shape);
    const Floats a = RandomFloats(AElements(args), 1);
    const Floats b = RandomFloats(BElements(args), 2);
    const Floats c = RandomFloats(CElements(args), 3);
    args.a = a.data();
    args.b = b.data();
    Floats whole = c, tiled = c;
    CpuOps ops(2);
    args.c = whole.data();
    ops.Gemm(args);
    ops.SetMatmulStagingBytes(16 << 10);
    args.c = tiled.data();
    ops.Gemm(args);
    ASSERT_TRUE(ops.status().ok()) << ops.status();
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_NEAR(tiled[i], whole[i], 1e-5 * (1 + std::abs(whole[i]))) << i;
    }
  }
}

// bf16 operands are their values: a product given them (read in place, in
// any layout and leading dimension) gives bitwise what it gives with those
// values as float32 (converted into the staging), whole or in tiles.
TEST(CpuOpsBf16Test, Bf16OperandsGiveBitwiseTheirFloat32Values) {
  for (const int64_t staging_bytes :
       {kDefaultMatmulStagingBytes, int64_t{16} << 10}) {
    for (const ProductShape& shape :
         {ProductShape{300, 96, 64, Transpose::kNo, Transpose::kYes, 0, 1.0f},
          ProductShape{64, 96, 300, Transpose::kYes, Transpose::kNo, 0, 1.0f},
          ProductShape{200, 300, 64, Transpose::kNo, Transpose::kNo, 0, 1.0f},
          ProductShape{97, 33, 40, Transpose::kYes, Transpose::kYes, 3, 1.0f},
          ProductShape{97, 33, 40, Transpose::kNo, Transpose::kYes, 3, 1.0f}}) {
      SCOPED_TRACE(testing::Message()
                   << shape.m << " x " << shape.n << " x " << shape.k
                   << ", staging " << staging_bytes);
      GemmArgs args = Bf16ArgsOf(shape);
      const conformance::Bf16s a =
          conformance::ToBf16(RandomFloats(AElements(args), 4));
      const conformance::Bf16s b =
          conformance::ToBf16(RandomFloats(BElements(args), 5));
      const Floats a_values = conformance::FromBf16(a);
      const Floats b_values = conformance::FromBf16(b);
      const Floats c = RandomFloats(CElements(args), 6);
      CpuOps ops(2);
      ops.SetMatmulStagingBytes(staging_bytes);
      Floats expected = c;
      args.a = a_values.data();
      args.b = b_values.data();
      args.c = expected.data();
      ops.Gemm(args);
      for (const bool bf16_a : {false, true}) {
        for (const bool bf16_b : {false, true}) {
          if (!bf16_a && !bf16_b) continue;
          GemmArgs bf16_args = args;
          Floats actual = c;
          bf16_args.c = actual.data();
          if (bf16_a) {
            bf16_args.a = nullptr;
            bf16_args.a_bf16 = a.data();
          }
          if (bf16_b) {
            bf16_args.b = nullptr;
            bf16_args.b_bf16 = b.data();
          }
          ops.Gemm(bf16_args);
          ASSERT_TRUE(ops.status().ok()) << ops.status();
          conformance::ExpectSame(actual, expected, "bf16 operands");
        }
      }
    }
  }
}

// A product written in bf16 (GemmArgs::c_bf16) is bitwise its float32
// result rounded to nearest even, whole or in tiles, at any thread count;
// one asked to accumulate into bf16 is an error that names the field.
TEST(CpuOpsBf16Test, ProductsWrittenInBf16AreTheirFloat32ResultsRounded) {
  for (const int64_t staging_bytes :
       {kDefaultMatmulStagingBytes, int64_t{16} << 10}) {
    for (const ProductShape& shape :
         {ProductShape{300, 96, 64, Transpose::kNo, Transpose::kYes, 0, 0.0f},
          ProductShape{520, 200, 700, Transpose::kYes, Transpose::kNo, 0, 0.0f},
          ProductShape{97, 33, 40, Transpose::kYes, Transpose::kYes, 3,
                       0.0f}}) {
      SCOPED_TRACE(testing::Message()
                   << shape.m << " x " << shape.n << " x " << shape.k
                   << ", staging " << staging_bytes);
      GemmArgs args = Bf16ArgsOf(shape);
      const Floats a = RandomFloats(AElements(args), 7);
      const Floats b = RandomFloats(BElements(args), 8);
      args.a = a.data();
      args.b = b.data();
      Floats float32(CElements(args));
      CpuOps reference(1);
      reference.SetMatmulStagingBytes(staging_bytes);
      args.c = float32.data();
      reference.Gemm(args);
      const conformance::Bf16s expected = conformance::ToBf16(float32);
      for (const int threads : {1, 2, 3}) {
        CpuOps ops(threads);
        ops.SetMatmulStagingBytes(staging_bytes);
        conformance::Bf16s written(CElements(args));
        GemmArgs bf16_args = args;
        bf16_args.c = nullptr;
        bf16_args.c_bf16 = written.data();
        ops.Gemm(bf16_args);
        ASSERT_TRUE(ops.status().ok()) << ops.status();
        for (int64_t row = 0; row < args.m; ++row) {
          for (int64_t column = 0; column < args.n; ++column) {
            const int64_t at = row * args.ldc + column;
            ASSERT_EQ(written[at], expected[at])
                << row << ", " << column << " at " << threads << " threads";
          }
        }
      }
    }
  }

  GemmArgs accumulating =
      Bf16ArgsOf({16, 16, 16, Transpose::kNo, Transpose::kNo, 0, 1.0f});
  const Floats operand = RandomFloats(16 * 16, 9);
  conformance::Bf16s c(16 * 16);
  accumulating.a = operand.data();
  accumulating.b = operand.data();
  accumulating.c_bf16 = c.data();
  CpuOps ops(2);
  ops.Gemm(accumulating);
  EXPECT_TRUE(absl::IsInvalidArgument(ops.status())) << ops.status();
  EXPECT_NE(ops.status().message().find("GemmArgs::c_bf16"), std::string::npos)
      << ops.status();
}

// A row of a bf16 product is the same bits whatever rows it is made with:
// alone (an expert given one token), as the last of a piece, or among
// others, in every layout of a, written in float32 (accumulating or not) or
// in bf16; through oneDNN or, where it has no bf16 kernel, the fixed-order
// kernel.
TEST(CpuOpsBf16Test, ARowIsTheSameAloneAsAmongOthers) {
  CpuOps ops(2);
  const int64_t m = 5, k = 256, n = 512;
  for (const Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (const float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(testing::Message()
                   << (ta == Transpose::kYes ? "a transposed" : "a plain")
                   << ", beta " << beta);
      GemmArgs args = Bf16ArgsOf({m, n, k, ta, Transpose::kYes, 0, beta});
      const Floats a = RandomFloats(AElements(args), 10);
      const Floats b = RandomFloats(BElements(args), 11);
      const Floats c = RandomFloats(CElements(args), 12);
      args.a = a.data();
      args.b = b.data();
      Floats together = c;
      args.c = together.data();
      ops.Gemm(args);
      for (int64_t row = 0; row < m; ++row) {
        GemmArgs alone = args;
        alone.m = 1;
        alone.a = a.data() + (ta == Transpose::kNo ? row * args.lda : row);
        Floats single(c.begin() + row * n, c.begin() + (row + 1) * n);
        alone.c = single.data();
        ops.Gemm(alone);
        ASSERT_TRUE(ops.status().ok()) << ops.status();
        conformance::ExpectSame(single,
                                Floats(together.begin() + row * n,
                                       together.begin() + (row + 1) * n),
                                "one row");
        if (beta != 0.0f) continue;
        conformance::Bf16s rounded(n);
        alone.c = nullptr;
        alone.c_bf16 = rounded.data();
        ops.Gemm(alone);
        EXPECT_EQ(rounded, conformance::ToBf16(single)) << "row " << row;
      }
    }
  }
}

// The log's name for what runs bf16 products is what runs them.
TEST(CpuOpsBf16Test, Bf16ProductsKernelNamesWhatRunsThem) {
  CpuOps ops(1);
  const OneDnnMatmul* matmul = ops.Matmul(MatmulLayout{});
  if (matmul != nullptr) {
    EXPECT_EQ(CpuOps::Bf16ProductsKernel(),
              "oneDNN " + matmul->implementation());
  } else {
    EXPECT_EQ(CpuOps::Bf16ProductsKernel(),
              DetectedSimdLevel() >= SimdLevel::kAvx2 ? "fixed-order avx2"
                                                      : "fixed-order scalar");
  }
}

TEST(CpuOpsCreateTest, CreatesWhenOpenBlasLoads) {
  absl::StatusOr<std::unique_ptr<CpuOps>> ops = CpuOps::Create(2);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ((*ops)->threads(), 2);
}

// CpuOps is safe to share between threads (cpu_ops.h): concurrent calls,
// split across the pool or not, give bitwise what they give alone.
TEST_P(CpuOpsTest, ConcurrentCallersGetBitwiseTheirResultsAlone) {
  struct Work {
    Floats a, b, c;
    GemmArgs args;
    Floats x;
    Floats c_alone;
    double sum_of_squares_alone = 0.0;
  };
  auto make_work = [&](int seed, int64_t m) {
    Work w;
    const int64_t n = 64, k = 40;
    w.a = RandomFloats(m * k, seed);
    w.b = RandomFloats(n * k, seed + 1);
    w.c.assign(m * n, 0.0f);
    w.x = RandomFloats(20000 + seed, seed + 2);
    w.args.transpose_b = Transpose::kYes;
    w.args.m = m;
    w.args.n = n;
    w.args.k = k;
    w.args.a = w.a.data();
    w.args.lda = k;
    w.args.b = w.b.data();
    w.args.ldb = k;
    w.args.c = w.c.data();
    w.args.ldc = n;
    ops_.Gemm(w.args);
    w.c_alone = w.c;
    w.sum_of_squares_alone = ops_.SumOfSquares(w.x.size(), w.x.data());
    return w;
  };
  // A product big enough to split across the pool, and one that runs serial.
  std::vector<Work> works;
  works.push_back(make_work(30, 97));
  works.push_back(make_work(40, 5));
  std::atomic<int> failures{0};
  auto hammer = [&](Work& w) {
    w.args.a = w.a.data();
    w.args.b = w.b.data();
    w.args.c = w.c.data();
    for (int round = 0; round < 200; ++round) {
      std::fill(w.c.begin(), w.c.end(), 0.0f);
      ops_.Gemm(w.args);
      if (w.c != w.c_alone) ++failures;
      if (ops_.SumOfSquares(w.x.size(), w.x.data()) != w.sum_of_squares_alone) {
        ++failures;
      }
    }
  };
  std::thread first(hammer, std::ref(works[0]));
  std::thread second(hammer, std::ref(works[1]));
  first.join();
  second.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(CpuOpsTest, AdamWMatchesTheSingleThreadedKernel) {
  const int64_t count = 20011;
  Floats params = RandomFloats(count, 32), m = RandomFloats(count, 33, 0.01f);
  Floats v(count, 1e-4f);
  const Floats grads = RandomFloats(count, 34, 0.1f);
  Floats params_serial = params, m_serial = m, v_serial = v;
  AdamWHyperparameters hyper;
  hyper.weight_decay = 0.1f;
  const AdamWCoefficients coefficients = ComputeAdamWCoefficients(hyper);
  ops_.AdamWUpdate(coefficients, count, params.data(), grads.data(), m.data(),
                   v.data());
  AdamWUpdate(coefficients, count, params_serial.data(), grads.data(),
              m_serial.data(), v_serial.data());
  EXPECT_EQ(params, params_serial);
  EXPECT_EQ(v, v_serial);
}

// Slices of three matrices of different shapes, the middle one starting
// mid-row: the grouped passes give what the single-threaded kernels give
// slice by slice (the sums of u^2 to float64 rounding, the rest bitwise).
TEST_P(CpuOpsTest, TieredPassesMatchTheSingleThreadedKernels) {
  struct Matrix {
    int64_t rows, columns, first, count;
  };
  const Matrix matrices[] = {
      {300, 256, 0, 300 * 256}, {64, 100, 37, 5000}, {7, 3, 0, 21}};
  std::vector<Floats> params, grads, momentum, sums, roots;
  for (int i = 0; i < 3; ++i) {
    params.push_back(RandomFloats(matrices[i].count, 40 + i));
    grads.push_back(RandomFloats(matrices[i].count, 50 + i, 0.1f));
    momentum.push_back(RandomFloats(matrices[i].count, 60 + i, 0.01f));
    sums.push_back(Floats(matrices[i].rows + matrices[i].columns, 0.0f));
    roots.push_back(
        RandomFloats(matrices[i].rows + matrices[i].columns, 70 + i, 0.01f));
    for (float& root : roots.back()) root = std::abs(root) + 1e-3f;
  }
  auto slices_of = [&](std::vector<Floats>& p, std::vector<Floats>& m,
                       std::vector<Floats>& s) {
    std::vector<TieredSlice> slices(3);
    for (int i = 0; i < 3; ++i) {
      TieredSlice& slice = slices[i];
      slice.count = matrices[i].count;
      slice.params = p[i].data();
      slice.grads = grads[i].data();
      slice.momentum = i == 2 ? nullptr : m[i].data();
      slice.row_roots = roots[i].data();
      slice.column_roots = roots[i].data() + matrices[i].rows;
      slice.first_element = matrices[i].first;
      slice.columns = matrices[i].columns;
      slice.row_sums = s[i].data();
      slice.column_sums = s[i].data() + matrices[i].rows;
      slice.decay = i != 1;
      slice.update_scale = 0.5f;
    }
    return slices;
  };
  std::vector<Floats> params_serial = params, momentum_serial = momentum,
                      sums_serial = sums;
  const std::vector<TieredSlice> grouped = slices_of(params, momentum, sums);
  const std::vector<TieredSlice> serial =
      slices_of(params_serial, momentum_serial, sums_serial);
  const TieredCoefficients coefficients =
      ComputeTieredCoefficients(0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);

  ops_.AccumulateSquares(grouped);
  std::vector<double> measured(3);
  ops_.TieredMeasure(coefficients, grouped, absl::MakeSpan(measured));
  ops_.TieredApply(coefficients, grouped);
  for (int i = 0; i < 3; ++i) {
    AccumulateSquares(serial[i]);
    EXPECT_NEAR(measured[i], TieredMeasure(coefficients, serial[i]),
                1e-6 * measured[i]);
    TieredApply(coefficients, serial[i]);
    EXPECT_EQ(sums[i], sums_serial[i]) << i;
    EXPECT_EQ(momentum[i], momentum_serial[i]) << i;
    EXPECT_EQ(params[i], params_serial[i]) << i;
  }
  // The row and column sums against float64.
  const Matrix& middle = matrices[1];
  std::vector<double> row_sums(middle.rows, 0.0), column_sums(middle.columns);
  for (int64_t k = 0; k < middle.count; ++k) {
    const int64_t element = middle.first + k;
    const double square = double{grads[1][k]} * grads[1][k] + 1e-30;
    row_sums[element / middle.columns] += square;
    column_sums[element % middle.columns] += square;
  }
  for (int64_t r = 0; r < middle.rows; ++r) {
    ASSERT_NEAR(sums[1][r], row_sums[r], 1e-5 * row_sums[r] + 1e-30) << r;
  }
  for (int64_t c = 0; c < middle.columns; ++c) {
    ASSERT_NEAR(sums[1][middle.rows + c], column_sums[c], 1e-5 * column_sums[c])
        << c;
  }

  // TieredUpdate: each slice measured, then applied with its own clip.
  std::vector<Floats> fused_params = params, fused_momentum = momentum,
                      fused_sums = sums;
  std::vector<TieredSlice> fused =
      slices_of(fused_params, fused_momentum, fused_sums);
  std::vector<TieredSlice> expected =
      slices_of(params_serial, momentum_serial, sums_serial);
  ops_.TieredUpdate(coefficients, fused, /*clip_threshold=*/1.0f);
  for (int i = 0; i < 3; ++i) {
    const double rms = std::sqrt(TieredMeasure(coefficients, expected[i]) /
                                 static_cast<double>(expected[i].count));
    expected[i].update_scale = static_cast<float>(1.0 / std::max(1.0, rms));
    TieredApply(coefficients, expected[i]);
    EXPECT_EQ(fused_params[i], params_serial[i]) << i;
  }
}

TEST_P(CpuOpsTest, LionMatchesTheSingleThreadedKernel) {
  const int64_t count = 70001;
  Floats params = RandomFloats(count, 80), m = RandomFloats(count, 81, 0.01f);
  const Floats grads = RandomFloats(count, 82, 0.1f);
  Floats params_serial = params, m_serial = m;
  const TieredCoefficients coefficients =
      ComputeTieredCoefficients(1e-3f, 0.9f, 0.99f, 0.0f, 0.1f, 1);
  TieredSlice slice;
  slice.count = count;
  slice.params = params.data();
  slice.grads = grads.data();
  slice.momentum = m.data();
  ops_.LionUpdate(coefficients, {slice});
  slice.params = params_serial.data();
  slice.momentum = m_serial.data();
  LionUpdate(coefficients, slice);
  EXPECT_EQ(params, params_serial);
  EXPECT_EQ(m, m_serial);
  // Every parameter moved by exactly lr (times the decay's shrink).
  EXPECT_NEAR(std::abs(params[0] - RandomFloats(1, 80)[0] * coefficients.decay),
              1e-3f, 1e-6f);
}

// The products and the norms' weight gradients, the ops whose work is cut
// into pieces, give bitwise what one thread gives (cpu_ops.h): a job moved
// to a node with other cores trains the same. The shapes are cut into 1, 2
// and 4 pieces (PiecesOfProduct) along rows and along columns, with row
// counts OpenBLAS's kernels do not divide evenly; bf16 products in one
// round and in tiles.
TEST_P(CpuOpsTest, ProductsAndNormGradientsDoNotDependOnTheThreadCount) {
  if (GetParam() == 1) GTEST_SKIP() << "one thread is the reference";
  CpuOps one_thread(1);
  const auto expect_same_products = [&](std::vector<ProductShape> shapes,
                                        GemmPrecision precision,
                                        int64_t staging_bytes, int seed) {
    SCOPED_TRACE(testing::Message()
                 << (precision == GemmPrecision::kBf16 ? "bf16" : "float32")
                 << ", staging " << staging_bytes);
    std::vector<GemmArgs> problems;
    std::vector<Floats> operands;
    for (const ProductShape& shape : shapes) {
      GemmArgs args = Bf16ArgsOf(shape);
      args.precision = precision;
      operands.push_back(RandomFloats(AElements(args), seed++));
      operands.push_back(RandomFloats(BElements(args), seed++));
      problems.push_back(args);
    }
    std::vector<Floats> expected, actual;
    for (size_t i = 0; i < problems.size(); ++i) {
      problems[i].a = operands[2 * i].data();
      problems[i].b = operands[2 * i + 1].data();
      expected.push_back(RandomFloats(CElements(problems[i]), seed++));
      actual.push_back(expected.back());
    }
    one_thread.SetMatmulStagingBytes(staging_bytes);
    ops_.SetMatmulStagingBytes(staging_bytes);
    for (CpuOps* ops : {&one_thread, &ops_}) {
      std::vector<Floats>& c = ops == &one_thread ? expected : actual;
      for (size_t i = 0; i < problems.size(); ++i) problems[i].c = c[i].data();
      ops->Gemm(problems[0]);
      ops->GroupedGemm(absl::MakeConstSpan(problems).subspan(1));
      ASSERT_TRUE(ops->status().ok()) << ops->status();
    }
    for (size_t i = 0; i < problems.size(); ++i) {
      conformance::ExpectSame(actual[i], expected[i], "product");
    }
  };
  // A dense product split along rows, then experts of unequal sizes (one
  // split along columns, one empty) grouped in one call.
  const std::vector<ProductShape> shapes = {
      {1100, 256, 512, Transpose::kNo, Transpose::kYes, 0, 0.0f},
      {700, 256, 400, Transpose::kNo, Transpose::kNo, 0, 0.0f},
      {37, 256, 128, Transpose::kNo, Transpose::kNo, 3, 1.0f},
      {96, 2100, 400, Transpose::kYes, Transpose::kNo, 0, 1.0f},
      {0, 256, 128, Transpose::kNo, Transpose::kNo, 0, 0.0f},
      {260, 600, 1000, Transpose::kYes, Transpose::kYes, 1, 0.5f}};
  expect_same_products(shapes, GemmPrecision::kFloat32,
                       kDefaultMatmulStagingBytes, 100);
  expect_same_products(shapes, GemmPrecision::kBf16, kDefaultMatmulStagingBytes,
                       200);
  expect_same_products(shapes, GemmPrecision::kBf16, 64 << 10, 300);

  const int64_t rows = 1000, dim = 256, heads = 4, head_dim = 64;
  const Floats x = RandomFloats(rows * dim, 400);
  const Floats weight = RandomFloats(dim, 401);
  const Floats dout = RandomFloats(rows * dim, 402);
  Floats inverse_rms(rows), out(rows * dim);
  one_thread.RmsNormForward(rows, dim, x.data(), weight.data(), 1e-5f,
                            out.data(), inverse_rms.data());
  std::vector<Floats> dx(2, Floats(rows * dim, 0.0f));
  std::vector<Floats> dweight(2, Floats(dim, 0.0f));
  std::vector<Floats> head_dx(2, dout);
  std::vector<Floats> head_dweight(2, Floats(head_dim, 0.0f));
  for (int i = 0; i < 2; ++i) {
    CpuOps& ops = i == 0 ? one_thread : ops_;
    ops.RmsNormBackward(rows, dim, x.data(), weight.data(), inverse_rms.data(),
                        dout.data(), dx[i].data(), dweight[i].data());
    ops.HeadRmsNormBackward(rows, heads, head_dim, x.data(), dim, weight.data(),
                            1e-5f, dim, head_dx[i].data(),
                            head_dweight[i].data());
  }
  conformance::ExpectSame(dx[1], dx[0], "RMSNorm dx");
  conformance::ExpectSame(dweight[1], dweight[0], "RMSNorm dweight");
  conformance::ExpectSame(head_dx[1], head_dx[0], "QK-norm dx");
  conformance::ExpectSame(head_dweight[1], head_dweight[0], "QK-norm dweight");

  // Attention, whose blocks may go through oneDNN (single-threaded calls on
  // the pool's threads): 300 tokens cross two block boundaries.
  AttentionShape shape;
  shape.batch = 2;
  shape.seq_len = 300;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 32;
  const int64_t tokens = shape.batch * shape.seq_len;
  const int64_t width = shape.heads * shape.head_dim;
  const int64_t stride = width + 2 * shape.kv_heads * shape.head_dim;
  const Floats qkv = RandomFloats(tokens * stride, 403, 0.5f);
  const Floats attention_dout = RandomFloats(tokens * width, 404);
  std::vector<Floats> attention_out(2, Floats(tokens * width));
  std::vector<Floats> logsumexp(
      2, Floats(shape.batch * shape.heads * shape.seq_len));
  std::vector<Floats> dqkv(2, Floats(tokens * stride));
  const float* q = qkv.data();
  for (int i = 0; i < 2; ++i) {
    CpuOps& ops = i == 0 ? one_thread : ops_;
    ops.AttentionForward(shape, q, q + width,
                         q + width + shape.kv_heads * shape.head_dim, stride,
                         attention_out[i].data(), width, logsumexp[i].data());
    float* d = dqkv[i].data();
    ops.AttentionBackward(shape, q, q + width,
                          q + width + shape.kv_heads * shape.head_dim, stride,
                          attention_out[i].data(), attention_dout.data(), width,
                          logsumexp[i].data(), d, d + width,
                          d + width + shape.kv_heads * shape.head_dim);
    ASSERT_TRUE(ops.status().ok()) << ops.status();
  }
  conformance::ExpectSame(attention_out[1], attention_out[0], "attention out");
  conformance::ExpectSame(logsumexp[1], logsumexp[0], "attention logsumexp");
  conformance::ExpectSame(dqkv[1], dqkv[0], "attention gradients");
}

// Attention's blocks go through oneDNN exactly where OpenBLAS is held below
// an AVX-512 CPU's vectors (BUILD's cpu_ops_avx512_openblas_avx2_test); at
// every other level of BUILD's variants, through OpenBLAS.
TEST(CpuOpsAttentionTest, BlocksGoThroughOneDnnWhereOpenBlasIsNarrower) {
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  const bool openblas_held_below_avx512 =
      core != nullptr &&
      (std::string(core) == "Haswell" || std::string(core) == "Nehalem");
  EXPECT_EQ(
      CpuOps::AttentionBlocksThroughOneDnn(),
      openblas_held_below_avx512 && DetectedSimdLevel() == SimdLevel::kAvx512)
      << "OPENBLAS_CORETYPE " << (core == nullptr ? "unset" : core);
}

// The SIMD level the test runs at (BUILD's PLATEAU_SIMD) holds OpenBLAS's
// core and oneDNN's ISA with it, never above the CPU's.
TEST(CpuOpsLevelTest, OpenBlasAndOneDnnAreHeldAtTheSimdLevel) {
  const SimdLevel level = DetectedSimdLevel();
  ASSERT_TRUE(SimdLevelSupported(level));
  const std::string isa = OneDnnIsa();
  if (level == SimdLevel::kAvx2) {
    EXPECT_EQ(isa, "avx2");
  }
  if (level == SimdLevel::kScalar && SimdLevelSupported(SimdLevel::kAvx2)) {
    EXPECT_EQ(isa, "sse41");
  }
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's
  const std::string core = Blas().corename();
  switch (level) {
    case SimdLevel::kAvx512:
      EXPECT_EQ(core, __builtin_cpu_supports("avx512bw") &&
                              __builtin_cpu_supports("avx512vl") &&
                              __builtin_cpu_supports("avx512dq")
                          ? "SkylakeX"
                          : "Haswell");
      break;
    case SimdLevel::kAvx2:
      EXPECT_EQ(core, "Haswell");
      break;
    case SimdLevel::kScalar:
      if (SimdLevelSupported(SimdLevel::kAvx2)) {
        EXPECT_EQ(core, "Nehalem");
      }
      break;
  }
}

TEST(Bfloat16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even, 1.
  EXPECT_EQ(FloatToBfloat16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even.
  EXPECT_EQ(FloatToBfloat16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(FloatToBfloat16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(Bfloat16ToFloat(
      FloatToBfloat16(std::numeric_limits<float>::infinity()))));
  // The largest float rounds up to infinity, as float32 -> bfloat16 does.
  EXPECT_TRUE(std::isinf(
      Bfloat16ToFloat(FloatToBfloat16(std::numeric_limits<float>::max()))));
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuOpsTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) {
                           return std::to_string(info.param) + "_threads";
                         });

}  // namespace
}  // namespace plateau::kernels::cpu
