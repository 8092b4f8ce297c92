#include "kernels/cpu/onednn_matmul.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
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

// Against a float64 product of the same bf16 inputs: only the float32
// accumulation differs.
TEST(OneDnnMatmulTest, Bf16ProductsMatchAFloat64Reference) {
  std::mt19937 random(5);
  std::normal_distribution<float> normal;
  for (const bool transposed : {false, true}) {
    for (const auto& [m, k, n] :
         {std::tuple<int, int, int>{7, 33, 19}, {64, 256, 128}, {1, 1, 1}}) {
      SCOPED_TRACE(testing::Message() << m << " x " << k << " x " << n
                                      << (transposed ? " transposed" : ""));
      std::vector<uint16_t> a(m * k), b(k * n);
      for (uint16_t& value : a) value = FloatToBf16(normal(random));
      for (uint16_t& value : b) value = FloatToBf16(normal(random));
      absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
          OneDnnMatmul::Create(m, k, n, transposed, MatmulInput::kBf16);
      ASSERT_TRUE(matmul.ok()) << matmul.status();
      std::vector<float> c(m * n);
      ASSERT_TRUE((*matmul)->Run(a.data(), b.data(), c.data()).ok());
      for (int row = 0; row < m; ++row) {
        for (int column = 0; column < n; ++column) {
          double expected = 0;
          double magnitude = 0;
          for (int i = 0; i < k; ++i) {
            const double b_value =
                Bf16ToFloat(transposed ? b[column * k + i] : b[i * n + column]);
            const double term = Bf16ToFloat(a[row * k + i]) * b_value;
            expected += term;
            magnitude += std::abs(term);
          }
          EXPECT_NEAR(c[row * n + column], expected, 1e-6 * magnitude * k)
              << row << ", " << column;
        }
      }
    }
  }
}

TEST(OneDnnMatmulTest, Float32ForComparison) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // 2 x 3
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};  // 3 x 2
  absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
      OneDnnMatmul::Create(2, 3, 2, false, MatmulInput::kFloat32);
  ASSERT_TRUE(matmul.ok()) << matmul.status();
  std::vector<float> c(4);
  ASSERT_TRUE((*matmul)->Run(a.data(), b.data(), c.data()).ok());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  EXPECT_FALSE((*matmul)->implementation().empty());
}

TEST(OneDnnMatmulTest, ABadSizeIsNamed) {
  const absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
      OneDnnMatmul::Create(0, 3, 2, false, MatmulInput::kBf16);
  EXPECT_TRUE(absl::IsInvalidArgument(matmul.status()));
  EXPECT_TRUE(absl::StrContains(matmul.status().message(), "0 x 3 x 2"));
}

}  // namespace
}  // namespace plateau::kernels::cpu
