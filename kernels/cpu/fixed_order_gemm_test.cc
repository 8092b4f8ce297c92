#include "kernels/cpu/fixed_order_gemm.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

std::vector<float> RandomFloats(int64_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator);
  return values;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = FloatToBf16(values[i]);
  return bits;
}

float RoundedValue(float value) { return Bf16ToFloat(FloatToBf16(value)); }

// A product's shape and layout; a is stored [m, k] (or [k, m] transposed),
// b [k, n] (or [n, k]).
struct Shape {
  int64_t m, n, k;
  bool a_transposed, b_transposed;
};

struct Operands {
  std::vector<float> a, b;
  int64_t lda, ldb;
};

Operands MakeOperands(const Shape& shape, uint32_t seed) {
  Operands made;
  made.a = RandomFloats(shape.m * shape.k, seed);
  made.b = RandomFloats(shape.k * shape.n, seed + 1);
  made.lda = shape.a_transposed ? shape.m : shape.k;
  made.ldb = shape.b_transposed ? shape.k : shape.n;
  return made;
}

// The guarantee, element by element: one float32 sum in k order of the
// exact products of the rounded values.
float Expected(const Shape& shape, const Operands& operands, int64_t i,
               int64_t j, float alpha, float beta, float c) {
  float sum = 0.0f;
  for (int64_t d = 0; d < shape.k; ++d) {
    const float x = shape.a_transposed ? operands.a[d * operands.lda + i]
                                       : operands.a[i * operands.lda + d];
    const float y = shape.b_transposed ? operands.b[j * operands.ldb + d]
                                       : operands.b[d * operands.ldb + j];
    sum = std::fma(RoundedValue(x), RoundedValue(y), sum);
  }
  const float value = alpha == 1.0f ? sum : alpha * sum;
  return beta == 0.0f ? value : value + beta * c;
}

// Rows [first_row, first_row + rows) of the product, packed from the
// operands as float32 values or as their bf16 bits.
std::vector<float> Product(const Shape& shape, const Operands& operands,
                           bool as_bf16, int64_t first_row, int64_t rows,
                           float alpha, float beta, std::vector<float> c) {
  const std::vector<uint16_t> a_bits = ToBf16(operands.a);
  const std::vector<uint16_t> b_bits = ToBf16(operands.b);
  StoredMatrix a;
  a.stride = operands.lda;
  const int64_t a_offset =
      shape.a_transposed ? first_row : first_row * operands.lda;
  if (as_bf16) {
    a.bf16 = a_bits.data() + a_offset;
  } else {
    a.values = operands.a.data() + a_offset;
  }
  StoredMatrix b;
  b.stride = operands.ldb;
  if (as_bf16) {
    b.bf16 = b_bits.data();
  } else {
    b.values = operands.b.data();
  }
  std::vector<float> packed_a(PackedRowsElements(rows, shape.k), -1.0f);
  std::vector<float> packed_b(PackedColumnsElements(shape.n, shape.k), -1.0f);
  const int64_t row_panels = (rows + kPanelRows - 1) / kPanelRows;
  const int64_t column_panels = (shape.n + kPanelColumns - 1) / kPanelColumns;
  // Packed in two calls each, as threads share a block.
  PackRows(a, shape.a_transposed, rows, shape.k, 0, row_panels / 2,
           packed_a.data());
  PackRows(a, shape.a_transposed, rows, shape.k, row_panels / 2, row_panels,
           packed_a.data());
  PackColumns(b, shape.b_transposed, shape.n, shape.k, 0, column_panels / 2,
              packed_b.data());
  PackColumns(b, shape.b_transposed, shape.n, shape.k, column_panels / 2,
              column_panels, packed_b.data());
  FixedOrderProduct(rows, shape.n, shape.k, packed_a.data(), packed_b.data(),
                    alpha, beta, c.data(), nullptr, shape.n);
  return c;
}

class FixedOrderGemmTest : public ::testing::TestWithParam<Shape> {};

// Sizes that leave partial panels (rows and columns), whole ones, several
// blocks of c and several steps of k (256 at a time); every layout.
INSTANTIATE_TEST_SUITE_P(Shapes, FixedOrderGemmTest,
                         ::testing::Values(Shape{1, 1, 1, false, false},
                                           Shape{5, 7, 3, false, true},
                                           Shape{4, 24, 8, true, false},
                                           Shape{37, 53, 77, true, true},
                                           Shape{70, 101, 300, false, false},
                                           Shape{70, 101, 300, true, true},
                                           Shape{67, 200, 513, false, true},
                                           Shape{67, 200, 513, true, false}));

TEST_P(FixedOrderGemmTest, EveryElementIsOneSumInKOrder) {
  const Shape shape = GetParam();
  const Operands operands = MakeOperands(shape, 1);
  const std::vector<float> c = RandomFloats(shape.m * shape.n, 3);
  for (const bool as_bf16 : {false, true}) {
    for (const auto& [alpha, beta] :
         {std::pair{1.0f, 0.0f}, std::pair{1.0f, 1.0f},
          std::pair{0.5f, -2.0f}}) {
      SCOPED_TRACE(::testing::Message()
                   << (as_bf16 ? "bf16" : "float32") << " operands, alpha "
                   << alpha << ", beta " << beta);
      const std::vector<float> made =
          Product(shape, operands, as_bf16, 0, shape.m, alpha, beta, c);
      for (int64_t i = 0; i < shape.m; ++i) {
        for (int64_t j = 0; j < shape.n; ++j) {
          ASSERT_EQ(
              made[i * shape.n + j],
              Expected(shape, operands, i, j, alpha, beta, c[i * shape.n + j]))
              << "element " << i << ", " << j;
        }
      }
    }
  }
}

// A row is the same bits made alone (an expert given one token) as among
// the others, wherever it falls in its panel.
TEST_P(FixedOrderGemmTest, ARowIsTheSameAloneAsAmongOthers) {
  const Shape shape = GetParam();
  const Operands operands = MakeOperands(shape, 5);
  const std::vector<float> together =
      Product(shape, operands, false, 0, shape.m, 1.0f, 0.0f,
              std::vector<float>(shape.m * shape.n));
  for (int64_t row = 0; row < shape.m; row += 3) {
    const std::vector<float> alone =
        Product(shape, operands, false, row, 1, 1.0f, 0.0f,
                std::vector<float>(shape.n));
    ASSERT_EQ(alone, std::vector<float>(together.begin() + row * shape.n,
                                        together.begin() + (row + 1) * shape.n))
        << "row " << row;
  }
}

TEST(FixedOrderGemmTest, WritesBf16RoundedOnce) {
  const Shape shape{9, 30, 40, false, true};
  const Operands operands = MakeOperands(shape, 7);
  const std::vector<float> float32 =
      Product(shape, operands, false, 0, shape.m, 1.0f, 0.0f,
              std::vector<float>(shape.m * shape.n));
  std::vector<float> packed_a(PackedRowsElements(shape.m, shape.k));
  std::vector<float> packed_b(PackedColumnsElements(shape.n, shape.k));
  PackRows({operands.a.data(), nullptr, operands.lda}, false, shape.m, shape.k,
           0, (shape.m + kPanelRows - 1) / kPanelRows, packed_a.data());
  PackColumns({operands.b.data(), nullptr, operands.ldb}, true, shape.n,
              shape.k, 0, (shape.n + kPanelColumns - 1) / kPanelColumns,
              packed_b.data());
  // Written with a wider row stride: the gaps stay as they were.
  const int64_t ldc = shape.n + 3;
  std::vector<uint16_t> written(shape.m * ldc, 0xbeef);
  FixedOrderProduct(shape.m, shape.n, shape.k, packed_a.data(), packed_b.data(),
                    1.0f, 0.0f, nullptr, written.data(), ldc);
  for (int64_t i = 0; i < shape.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const uint16_t expected =
          j < shape.n ? FloatToBf16(float32[i * shape.n + j]) : 0xbeef;
      ASSERT_EQ(written[i * ldc + j], expected) << i << ", " << j;
    }
  }
}

// Packing rounds as FloatToBf16 does: to nearest even, NaN kept a NaN, the
// rest of a partial panel zeros.
TEST(FixedOrderGemmTest, PacksRoundedValuesAndZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float halfway = Bf16ToFloat(0x3f80) + std::ldexp(1.0f, -8);
  std::vector<float> a(3 * 16, 1.0f);
  a[0] = nan;
  a[1] = halfway;
  a[17] = -std::numeric_limits<float>::infinity();
  std::vector<float> packed(PackedRowsElements(3, 16), -1.0f);
  PackRows({a.data(), nullptr, 16}, false, 3, 16, 0, 1, packed.data());
  EXPECT_TRUE(std::isnan(packed[0]));
  EXPECT_EQ(packed[kPanelRows], 1.0f);  // halfway rounds to even
  EXPECT_EQ(packed[kPanelRows + 1], -std::numeric_limits<float>::infinity());
  for (int64_t d = 0; d < 16; ++d) {
    EXPECT_EQ(packed[d * kPanelRows + 3], 0.0f) << "k " << d;
  }
}

TEST(FixedOrderGemmTest, RunsAtTheDetectedLevel) {
  // The twins hold the level lower (BUILD); it is never above the CPU's.
  EXPECT_TRUE(SimdLevelSupported(DetectedSimdLevel()));
}

}  // namespace
}  // namespace plateau::kernels::cpu
