#include "kernels/cpu/bf16.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace plateau::kernels::cpu {
namespace {

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even one, 1.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 x 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: up, to even.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Past halfway rounds up.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)),
            0x3f81);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(
      Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(
      Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::infinity()))));
}

// Every element, NaN, infinities and subnormals included, as the scalar
// rounding gives it.
TEST(Bf16Test, VectorisedConversionMatchesTheScalarOne) {
  std::mt19937 random(9);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  std::uniform_int_distribution<uint32_t> bits;
  while (values.size() < 1003) {
    const uint32_t word = bits(random);
    float value = 0;
    std::memcpy(&value, &word, sizeof(value));
    values.push_back(value);
  }
  std::vector<uint16_t> converted(values.size());
  ConvertToBf16(values, absl::MakeSpan(converted));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(converted[i], FloatToBf16(values[i])) << i << ": " << values[i];
  }
}

// Random bits: NaN, infinities and subnormals among them.
float RandomBitsFloat(std::mt19937& random) {
  const uint32_t word = std::uniform_int_distribution<uint32_t>()(random);
  float value = 0;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

uint32_t BitsOf(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

struct MatrixShape {
  int64_t rows, columns, stride;
};

// With row strides wider than the rows, against the scalar
// rounding element by element: ragged sizes (vectorised runs and scalar
// edges) and whole vectors.
TEST(Bf16Test, MatricesConvertWithTheirStrides) {
  const int64_t to_padding = 5;
  std::mt19937 random(2);
  for (const MatrixShape& shape :
       {MatrixShape{45, 70, 77}, MatrixShape{64, 48, 48}}) {
    const int64_t rows = shape.rows, columns = shape.columns;
    std::vector<float> matrix(rows * shape.stride);
    for (float& value : matrix) value = RandomBitsFloat(random);
    const int64_t to_stride = columns + to_padding;
    std::vector<uint16_t> converted(rows * to_stride);
    ConvertMatrixToBf16(rows, columns, matrix.data(), shape.stride,
                        converted.data(), to_stride);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t column = 0; column < columns; ++column) {
        const int64_t at = row * to_stride + column;
        const uint16_t expected =
            FloatToBf16(matrix[row * shape.stride + column]);
        ASSERT_EQ(converted[at], expected) << row << ", " << column;
      }
    }
  }
}

// bf16 matrices widened, likewise.
TEST(Bf16Test, Bf16MatricesWidenWithTheirStrides) {
  const int64_t to_padding = 3;
  std::mt19937 random(3);
  for (const MatrixShape& shape :
       {MatrixShape{45, 70, 77}, MatrixShape{32, 16, 16}}) {
    const int64_t rows = shape.rows, columns = shape.columns;
    std::vector<uint16_t> matrix(rows * shape.stride);
    for (uint16_t& value : matrix) {
      value = static_cast<uint16_t>(random());
    }
    const int64_t to_stride = columns + to_padding;
    std::vector<float> widened(rows * to_stride);
    WidenBf16Matrix(rows, columns, matrix.data(), shape.stride, widened.data(),
                    to_stride);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t column = 0; column < columns; ++column) {
        const int64_t at = row * to_stride + column;
        const uint16_t expected = matrix[row * shape.stride + column];
        ASSERT_EQ(BitsOf(widened[at]), uint32_t{expected} << 16)
            << row << ", " << column;
      }
    }
  }
}

}  // namespace
}  // namespace plateau::kernels::cpu
