#include "kernels/cpu/onednn_matmul.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16.h"

namespace plateau::kernels::cpu {
namespace {

// Against a float64 product of the same bf16 inputs, in every layout and
// with accumulation: only the float32 accumulation differs.
TEST(OneDnnMatmulTest, Bf16ProductsMatchAFloat64Reference) {
  std::mt19937 random(5);
  std::normal_distribution<float> normal;
  for (const bool a_transposed : {false, true}) {
    for (const bool b_transposed : {false, true}) {
      for (const auto& [alpha, beta] :
           {std::pair<float, float>{1, 0}, {1, 1}, {0.5f, -2}}) {
        MatmulLayout layout;
        layout.a_transposed = a_transposed;
        layout.b_transposed = b_transposed;
        layout.alpha = alpha;
        layout.beta = beta;
        absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
            OneDnnMatmul::Create(layout);
        ASSERT_TRUE(matmul.ok()) << matmul.status();
        // One kernel, many shapes.
        for (const auto& [m, k, n] : {std::tuple<int, int, int>{7, 33, 19},
                                      {64, 256, 128},
                                      {1, 1, 1}}) {
          SCOPED_TRACE(testing::Message()
                       << m << " x " << k << " x " << n << " a^T "
                       << a_transposed << " b^T " << b_transposed << " alpha "
                       << alpha << " beta " << beta);
          std::vector<uint16_t> a(m * k), b(k * n);
          for (uint16_t& value : a) value = FloatToBf16(normal(random));
          for (uint16_t& value : b) value = FloatToBf16(normal(random));
          std::vector<float> c(m * n);
          for (float& value : c) value = normal(random);
          const std::vector<float> c_before = c;
          ASSERT_TRUE(
              (*matmul)->Run(m, k, n, a.data(), b.data(), c.data()).ok());
          for (int row = 0; row < m; ++row) {
            for (int column = 0; column < n; ++column) {
              double product = 0;
              double magnitude = 0;
              for (int i = 0; i < k; ++i) {
                const double a_value =
                    Bf16ToFloat(a_transposed ? a[i * m + row] : a[row * k + i]);
                const double b_value = Bf16ToFloat(
                    b_transposed ? b[column * k + i] : b[i * n + column]);
                product += a_value * b_value;
                magnitude += std::abs(a_value * b_value);
              }
              const double expected =
                  alpha * product + beta * c_before[row * n + column];
              EXPECT_NEAR(c[row * n + column], expected,
                          1e-6 * (magnitude * k + std::abs(expected)))
                  << row << ", " << column;
            }
          }
        }
      }
    }
  }
}

TEST(OneDnnMatmulTest, Float32ForComparison) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // 2 x 3
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};  // 3 x 2
  MatmulLayout layout;
  layout.input = MatmulInput::kFloat32;
  absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
      OneDnnMatmul::Create(layout);
  ASSERT_TRUE(matmul.ok()) << matmul.status();
  std::vector<float> c(4);
  ASSERT_TRUE((*matmul)->Run(2, 3, 2, a.data(), b.data(), c.data()).ok());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  EXPECT_FALSE((*matmul)->implementation().empty());
}

TEST(OneDnnMatmulTest, ABadSizeIsNamed) {
  absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
      OneDnnMatmul::Create(MatmulLayout());
  ASSERT_TRUE(matmul.ok()) << matmul.status();
  float c = 0;
  const absl::Status status = (*matmul)->Run(0, 3, 2, &c, &c, &c);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_TRUE(absl::StrContains(status.message(), "0 x 3 x 2"));
}

}  // namespace
}  // namespace plateau::kernels::cpu
