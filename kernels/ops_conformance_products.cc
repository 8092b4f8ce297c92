// Gemm and GroupedGemm against float64 products.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

// x as a bf16 product sees it (kernels/ops.h, GemmPrecision).
double RoundToBf16(float x) { return FromBf16(ToBf16(x)); }

// The product of GemmArgs whose pointers address the host copies a, b, c,
// with inputs rounded as a bf16 product (IsBf16Product) rounds them.
Doubles ReferenceGemm(const GemmArgs& args, const Floats& a, const Floats& b,
                      const Floats& c_before) {
  const bool bf16 = IsBf16Product(args);
  const auto input = [bf16](float x) {
    return bf16 ? RoundToBf16(x) : static_cast<double>(x);
  };
  Doubles c(c_before.begin(), c_before.end());
  for (int64_t i = 0; i < args.m; ++i) {
    for (int64_t j = 0; j < args.n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < args.k; ++p) {
        const double a_ip =
            input(args.transpose_a == Transpose::kNo ? a[i * args.lda + p]
                                                     : a[p * args.lda + i]);
        const double b_pj =
            input(args.transpose_b == Transpose::kNo ? b[p * args.ldb + j]
                                                     : b[j * args.ldb + p]);
        sum += a_ip * b_pj;
      }
      c[i * args.ldc + j] = args.alpha * sum + args.beta * c[i * args.ldc + j];
    }
  }
  return c;
}

struct GemmShape {
  int64_t m, n, k;
  Transpose transpose_a, transpose_b;
  int64_t padding;  // added to every leading dimension
};

// One product's operands on the host and on the device.
struct GemmOperands {
  GemmOperands(ConformanceBackend& backend, const GemmShape& shape, float beta,
               int seed, GemmPrecision precision = GemmPrecision::kFloat32) {
    args.precision = precision;
    args.transpose_a = shape.transpose_a;
    args.transpose_b = shape.transpose_b;
    args.m = shape.m;
    args.n = shape.n;
    args.k = shape.k;
    args.alpha = 0.75f;
    args.beta = beta;
    const bool plain_a = shape.transpose_a == Transpose::kNo;
    const bool plain_b = shape.transpose_b == Transpose::kNo;
    args.lda = (plain_a ? shape.k : shape.m) + shape.padding;
    args.ldb = (plain_b ? shape.n : shape.k) + shape.padding;
    args.ldc = shape.n + shape.padding;
    a = RandomFloats((plain_a ? shape.m : shape.k) * args.lda, seed);
    b = RandomFloats((plain_b ? shape.k : shape.n) * args.ldb, seed + 1);
    c = RandomFloats(shape.m * args.ldc, seed + 2);
    device_a = std::make_unique<DeviceFloats>(backend, a);
    device_b = std::make_unique<DeviceFloats>(backend, b);
    device_c = std::make_unique<DeviceFloats>(backend, c);
    args.a = device_a->get();
    args.b = device_b->get();
    args.c = device_c->get();
  }
  Doubles Expected() const { return ReferenceGemm(args, a, b, c); }

  GemmArgs args;
  Floats a, b, c;
  std::unique_ptr<DeviceFloats> device_a, device_b, device_c;
};

// In both precisions, bf16 against a float64 product of the bf16-rounded
// inputs: only the float32 accumulation differs, so the tolerance is the
// same.
TEST_P(OpsConformanceTest, GemmMatchesFloat64InEveryLayout) {
  struct Size {
    int64_t m, n, k;
  };
  for (const GemmPrecision precision :
       {GemmPrecision::kFloat32, GemmPrecision::kBf16}) {
    // Tall, wide, tiny, ragged, single rows and columns, and k = 0
    // (c = beta c).
    int seed = 1;
    for (const Size& size :
         {Size{97, 33, 40}, Size{20, 130, 64}, Size{3, 5, 7}, Size{64, 64, 1},
          Size{1, 130, 7}, Size{64, 1, 33}, Size{5, 6, 0}}) {
      for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
        for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
          // Leading dimensions wider than the matrices, as for strided views,
          // and dense ones (where they are valid: at least 1).
          for (const int64_t padding : {3, size.k == 0 ? 3 : 0}) {
            GemmOperands product(backend(),
                                 {size.m, size.n, size.k, ta, tb, padding},
                                 0.5f, seed += 3, precision);
            ops().Gemm(product.args);
            ExpectClose(
                product.device_c->Read(), product.Expected(), 2e-5,
                precision == GemmPrecision::kBf16 ? "bf16 Gemm" : "Gemm");
          }
        }
      }
    }
  }
}

// bf16 products differ from float32 ones by bf16's rounding: far more than
// the accumulation order, so the reference above tells the two apart.
TEST_P(OpsConformanceTest, Bf16GemmRoundsItsInputs) {
  GemmOperands exact(backend(),
                     {64, 48, 96, Transpose::kNo, Transpose::kYes, 0}, 0.0f, 7);
  GemmOperands rounded(backend(),
                       {64, 48, 96, Transpose::kNo, Transpose::kYes, 0}, 0.0f,
                       7, GemmPrecision::kBf16);
  ops().Gemm(exact.args);
  ops().Gemm(rounded.args);
  const Floats exact_c = exact.device_c->Read();
  const Floats rounded_c = rounded.device_c->Read();
  double largest_difference = 0;
  for (size_t i = 0; i < exact_c.size(); ++i) {
    largest_difference =
        std::max(largest_difference,
                 std::abs(static_cast<double>(exact_c[i]) - rounded_c[i]));
  }
  EXPECT_GT(largest_difference, 1e-3);
}

TEST_P(OpsConformanceTest, GroupedGemmMatchesEachProductAlone) {
  // Skewed experts, as routing makes them: a large one, an empty one, small
  // ones; mixed transposes; beta 0 (c uninitialised) and 1 (accumulate); in
  // both precisions, and both in one group.
  const std::vector<GemmShape> shapes = {
      {300, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {0, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {7, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {1, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {16, 24, 9, Transpose::kYes, Transpose::kNo, 0},
      {64, 48, 32, Transpose::kNo, Transpose::kYes, 0}};
  std::vector<std::unique_ptr<GemmOperands>> products;
  std::vector<GemmArgs> problems;
  for (const bool mixed : {false, true}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      products.push_back(std::make_unique<GemmOperands>(
          backend(), shapes[i], i % 2 == 0 ? 0.0f : 1.0f, 10 * (i + 1),
          mixed && i % 3 != 0 ? GemmPrecision::kBf16
                              : GemmPrecision::kFloat32));
      problems.push_back(products.back()->args);
    }
  }
  ops().GroupedGemm(problems);
  for (const std::unique_ptr<GemmOperands>& product : products) {
    ExpectClose(product->device_c->Read(), product->Expected(), 2e-5,
                "GroupedGemm");
  }
}

// Which operands a product takes as bf16 (GemmArgs::a_bf16, b_bf16).
enum class Bf16Operands { kA, kB, kBoth };

// The operands' bf16 copies on the device, given to the product in place
// of its float32 ones: the same values, so the same reference.
struct Bf16OperandsOf {
  Bf16OperandsOf(ConformanceBackend& backend, GemmOperands& product,
                 Bf16Operands which)
      : a(backend, ToBf16(product.a)), b(backend, ToBf16(product.b)) {
    if (which != Bf16Operands::kB) {
      product.args.a = nullptr;
      product.args.a_bf16 = a.get();
    }
    if (which != Bf16Operands::kA) {
      product.args.b = nullptr;
      product.args.b_bf16 = b.get();
    }
  }
  DeviceBf16s a, b;
};

TEST_P(OpsConformanceTest, GemmTakesBf16OperandsInEveryLayout) {
  struct Size {
    int64_t m, n, k;
  };
  int seed = 200;
  for (const Bf16Operands which :
       {Bf16Operands::kA, Bf16Operands::kB, Bf16Operands::kBoth}) {
    for (const Size& size : {Size{97, 33, 40}, Size{20, 130, 64}, Size{3, 5, 7},
                             Size{1, 130, 7}, Size{64, 1, 33}}) {
      for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
        for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
          // Dense operands (which the CPU reads in place) and padded ones.
          for (const int64_t padding : {0, 3}) {
            GemmOperands product(backend(),
                                 {size.m, size.n, size.k, ta, tb, padding},
                                 0.5f, seed += 3, GemmPrecision::kBf16);
            Bf16OperandsOf bf16(backend(), product, which);
            ops().Gemm(product.args);
            ExpectClose(product.device_c->Read(), product.Expected(), 2e-5,
                        "Gemm with bf16 operands");
          }
        }
      }
    }
  }
}

// A bf16 operand makes a bf16 product whatever `precision` says: the other
// operand is rounded too (the reference tells the two apart, as in
// Bf16GemmRoundsItsInputs).
TEST_P(OpsConformanceTest, ABf16OperandMakesABf16Product) {
  for (const bool grouped : {false, true}) {
    GemmOperands product(
        backend(), {64, 48, 96, Transpose::kNo, Transpose::kYes, 0}, 0.0f, 9);
    Bf16OperandsOf bf16(backend(), product, Bf16Operands::kA);
    if (grouped) {
      ops().GroupedGemm({product.args});
    } else {
      ops().Gemm(product.args);
    }
    ExpectClose(
        product.device_c->Read(), product.Expected(), 2e-5,
        grouped ? "GroupedGemm, one bf16 operand" : "Gemm, one bf16 operand");
  }
}

// A staging far smaller than the operands' bf16 copies: the products go in
// tiles of rows and of column blocks (kernels/ops.h SetMatmulStagingBytes),
// in every layout, padded or dense, with float32 or bf16 operands, and are
// the same products.
TEST_P(OpsConformanceTest, Bf16ProductsLargerThanTheStagingGoInTiles) {
  ops().SetMatmulStagingBytes(16 << 10);
  struct Size {
    int64_t m, n, k;
  };
  int seed = 500;
  for (const Size& size :
       {Size{200, 300, 64}, Size{50, 40, 500}, Size{97, 33, 40},
        Size{1, 130, 7}, Size{300, 2, 9}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (const int64_t padding : {0, 3}) {
          for (const int bf16_operand : {-1, 0, 1}) {  // none, a, b
            SCOPED_TRACE(testing::Message()
                         << size.m << " x " << size.n << " x " << size.k
                         << ", padding " << padding << ", bf16 operand "
                         << bf16_operand);
            GemmOperands product(backend(),
                                 {size.m, size.n, size.k, ta, tb, padding},
                                 0.5f, seed += 3, GemmPrecision::kBf16);
            std::optional<Bf16OperandsOf> bf16;
            if (bf16_operand >= 0) {
              bf16.emplace(
                  backend(), product,
                  bf16_operand == 0 ? Bf16Operands::kA : Bf16Operands::kB);
            }
            ops().Gemm(product.args);
            ExpectClose(product.device_c->Read(), product.Expected(), 2e-5,
                        "bf16 Gemm in tiles");
          }
        }
      }
    }
  }
  ops().SetMatmulStagingBytes(kDefaultMatmulStagingBytes);
}

// Products large enough that the CPU backend cuts them into pieces
// (kernels/cpu/thread_pool.h PiecesOfProduct) of unequal rows; with a
// transposed a, as a weight gradient's, each piece reads its columns of a
// stored [k, m] block, in place (bf16) or in the staging's copy (float32).
TEST_P(OpsConformanceTest, Bf16ProductsCutIntoPiecesAreTheSameProducts) {
  int seed = 800;
  for (const GemmShape& shape :
       {GemmShape{520, 200, 700, Transpose::kYes, Transpose::kNo, 0},
        GemmShape{520, 200, 700, Transpose::kYes, Transpose::kYes, 3},
        GemmShape{300, 260, 1000, Transpose::kNo, Transpose::kYes, 0}}) {
    for (const bool bf16_a : {false, true}) {
      SCOPED_TRACE(
          testing::Message()
          << shape.m << " x " << shape.n << " x " << shape.k
          << (shape.transpose_a == Transpose::kYes ? ", a transposed" : "")
          << (bf16_a ? ", a in bf16" : ""));
      GemmOperands product(backend(), shape, 1.0f, seed += 3,
                           GemmPrecision::kBf16);
      std::optional<Bf16OperandsOf> bf16;
      if (bf16_a) bf16.emplace(backend(), product, Bf16Operands::kA);
      ops().Gemm(product.args);
      ExpectClose(product.device_c->Read(), product.Expected(), 2e-5,
                  "bf16 Gemm in pieces");
    }
  }
}

// A bf16 product writing bf16 (GemmArgs::c_bf16): each element its product
// rounded to nearest even, within bf16's half unit in the last place of the
// float64 reference (and its sum's float32 error); the padding between
// rows untouched. In every layout, padded or dense, with float32 or bf16
// operands, in one tile or many (a far smaller staging), one product cut
// into pieces, and two in one group.
TEST_P(OpsConformanceTest, Bf16ProductsWriteBf16) {
  const uint16_t untouched = 0x7fc1;  // a NaN no product writes
  int seed = 900;
  for (const int64_t staging_bytes :
       {kDefaultMatmulStagingBytes, int64_t{16} << 10}) {
    ops().SetMatmulStagingBytes(staging_bytes);
    for (const GemmShape& shape :
         {GemmShape{97, 33, 40, Transpose::kNo, Transpose::kYes, 0},
          GemmShape{20, 130, 64, Transpose::kYes, Transpose::kNo, 3},
          GemmShape{64, 48, 96, Transpose::kNo, Transpose::kNo, 3},
          GemmShape{5, 6, 0, Transpose::kYes, Transpose::kYes, 3},
          GemmShape{520, 200, 700, Transpose::kYes, Transpose::kNo, 0}}) {
      for (const bool bf16_a : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << shape.m << " x " << shape.n << " x " << shape.k
                     << ", padding " << shape.padding << ", staging "
                     << staging_bytes << (bf16_a ? ", a in bf16" : ""));
        std::vector<std::unique_ptr<GemmOperands>> products;
        std::vector<std::unique_ptr<DeviceBf16s>> outputs;
        std::vector<std::optional<Bf16OperandsOf>> bf16(2);
        std::vector<GemmArgs> problems;
        for (int i = 0; i < 2; ++i) {
          products.push_back(std::make_unique<GemmOperands>(
              backend(), shape, 0.0f, seed += 3, GemmPrecision::kBf16));
          GemmOperands& product = *products.back();
          if (bf16_a) bf16[i].emplace(backend(), product, Bf16Operands::kA);
          outputs.push_back(std::make_unique<DeviceBf16s>(
              backend(), Bf16s(product.c.size(), untouched)));
          product.args.c = nullptr;
          product.args.c_bf16 = outputs.back()->get();
          problems.push_back(product.args);
        }
        ops().GroupedGemm(problems);
        for (int i = 0; i < 2; ++i) {
          const Bf16s written = outputs[i]->Read();
          const Doubles expected = products[i]->Expected();
          Floats values(written.size());
          Doubles expected_values(written.size());
          for (int64_t row = 0; row < shape.m; ++row) {
            for (int64_t column = 0; column < problems[i].ldc; ++column) {
              const int64_t at = row * problems[i].ldc + column;
              if (column >= shape.n) {
                ASSERT_EQ(written[at], untouched) << "padding at " << at;
                continue;
              }
              values[at] = FromBf16(written[at]);
              expected_values[at] = expected[at];
            }
          }
          ExpectClose(values, expected_values, 1.0 / 256 + 2e-5,
                      "bf16 Gemm written in bf16");
        }
      }
    }
  }
  ops().SetMatmulStagingBytes(kDefaultMatmulStagingBytes);
}

// An expert's gate and up projections read the same rows: one group, one
// input, two weights.
TEST_P(OpsConformanceTest, GroupedBf16ProductsMayShareAnInput) {
  const GemmShape shape = {40, 24, 32, Transpose::kNo, Transpose::kYes, 0};
  GemmOperands gate(backend(), shape, 0.0f, 3, GemmPrecision::kBf16);
  GemmOperands up(backend(), shape, 0.0f, 5, GemmPrecision::kBf16);
  up.a = gate.a;
  up.args.a = gate.args.a;
  ops().GroupedGemm({gate.args, up.args});
  ExpectClose(gate.device_c->Read(), gate.Expected(), 2e-5, "gate");
  ExpectClose(up.device_c->Read(), up.Expected(), 2e-5, "up");

  // The same with the rows in bf16, as the engine stores an expert's input.
  DeviceBf16s rows(backend(), ToBf16(gate.a));
  for (GemmOperands* product : {&gate, &up}) {
    product->args.a = nullptr;
    product->args.a_bf16 = rows.get();
  }
  ops().GroupedGemm({gate.args, up.args});
  ExpectClose(gate.device_c->Read(), gate.Expected(), 2e-5, "gate, bf16 rows");
  ExpectClose(up.device_c->Read(), up.Expected(), 2e-5, "up, bf16 rows");
}

}  // namespace
}  // namespace plateau::kernels::conformance
