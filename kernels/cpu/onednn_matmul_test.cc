#include "kernels/cpu/onednn_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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
        if (absl::IsUnimplemented(matmul.status())) {
          GTEST_SKIP() << matmul.status();
        }
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

// A row of c is the same bits made alone as among others (oneDNN's own
// one-row product sums in another order), in both input types, either
// layout of a, accumulating or not.
TEST(OneDnnMatmulTest, ARowIsTheSameAloneAsAmongOthers) {
  std::mt19937 random(6);
  std::normal_distribution<float> normal;
  const int m = 5, k = 256, n = 512;
  for (const MatmulInput input : {MatmulInput::kBf16, MatmulInput::kFloat32}) {
    for (const bool a_transposed : {false, true}) {
      for (const float beta : {0.0f, 1.0f}) {
        SCOPED_TRACE(testing::Message()
                     << (input == MatmulInput::kBf16 ? "bf16" : "float32")
                     << " a^T " << a_transposed << " beta " << beta);
        MatmulLayout layout;
        layout.input = input;
        layout.a_transposed = a_transposed;
        layout.b_transposed = true;
        layout.beta = beta;
        absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
            OneDnnMatmul::Create(layout);
        if (absl::IsUnimplemented(matmul.status())) {
          GTEST_SKIP() << matmul.status();
        }
        ASSERT_TRUE(matmul.ok()) << matmul.status();
        // Float32 values exact in bf16, so that both types hold them.
        std::vector<float> a(m * k), b(k * n), c(m * n);
        for (float& value : a) value = Bf16ToFloat(FloatToBf16(normal(random)));
        for (float& value : b) value = Bf16ToFloat(FloatToBf16(normal(random)));
        for (float& value : c) value = normal(random);
        std::vector<uint16_t> a_bits(a.size()), b_bits(b.size());
        for (size_t i = 0; i < a.size(); ++i) a_bits[i] = FloatToBf16(a[i]);
        for (size_t i = 0; i < b.size(); ++i) b_bits[i] = FloatToBf16(b[i]);
        const bool bf16 = input == MatmulInput::kBf16;
        const void* b_data =
            bf16 ? static_cast<const void*>(b_bits.data()) : b.data();
        // a stored [m, k], or [k, m] when transposed.
        std::vector<float> together = c;
        ASSERT_TRUE(
            (*matmul)
                ->Run(m, k, n,
                      bf16 ? static_cast<const void*>(a_bits.data()) : a.data(),
                      b_data, together.data())
                .ok());
        for (int row = 0; row < m; ++row) {
          // The row's k values, dense: the same block in either layout.
          std::vector<float> row_values(k);
          std::vector<uint16_t> row_bits(k);
          for (int i = 0; i < k; ++i) {
            row_values[i] = a_transposed ? a[i * m + row] : a[row * k + i];
            row_bits[i] = FloatToBf16(row_values[i]);
          }
          std::vector<float> alone(c.begin() + row * n,
                                   c.begin() + (row + 1) * n);
          ASSERT_TRUE((*matmul)
                          ->Run(1, k, n,
                                bf16 ? static_cast<const void*>(row_bits.data())
                                     : row_values.data(),
                                b_data, alone.data())
                          .ok());
          EXPECT_EQ(alone, std::vector<float>(together.begin() + row * n,
                                              together.begin() + (row + 1) * n))
              << "row " << row;
        }
      }
    }
  }
}

// Operands and c read and written where they are, inside larger matrices
// (leading dimensions past their rows, blocks that start at odd elements):
// the same bits as the product of dense copies of them, with c's elements
// around the block untouched; in both input types, every layout, with and
// without accumulation, one row and many.
TEST(OneDnnMatmulTest, StridedMatricesAreTheSameProductsAsDenseOnes) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  const int k = 96, n = 80;
  const int lda_extra = 5, ldb_extra = 3, ldc_extra = 7, offset = 3;
  for (const MatmulInput input : {MatmulInput::kBf16, MatmulInput::kFloat32}) {
    for (const bool a_transposed : {false, true}) {
      for (const bool b_transposed : {false, true}) {
        for (const float beta : {0.0f, 1.0f}) {
          MatmulLayout layout;
          layout.input = input;
          layout.a_transposed = a_transposed;
          layout.b_transposed = b_transposed;
          layout.beta = beta;
          absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
              OneDnnMatmul::Create(layout);
          if (absl::IsUnimplemented(matmul.status())) {
            GTEST_SKIP() << matmul.status();
          }
          ASSERT_TRUE(matmul.ok()) << matmul.status();
          const bool bf16 = input == MatmulInput::kBf16;
          const size_t element_bytes = bf16 ? sizeof(uint16_t) : sizeof(float);
          for (const int m : {1, 48}) {
            SCOPED_TRACE(testing::Message()
                         << (bf16 ? "bf16" : "float32") << " m " << m << " a^T "
                         << a_transposed << " b^T " << b_transposed << " beta "
                         << beta);
            // Stored shapes (rows x row length) of a and b, dense and within
            // the larger matrices.
            const int a_rows = a_transposed ? k : m;
            const int a_row = a_transposed ? m : k;
            const int b_rows = b_transposed ? n : k;
            const int b_row = b_transposed ? k : n;
            const int lda = a_row + lda_extra, ldb = b_row + ldb_extra;
            const int ldc = n + ldc_extra;
            // Values exact in bf16, as each type's bytes.
            const auto values = [&](int count) {
              std::vector<char> bytes(count * element_bytes);
              for (int i = 0; i < count; ++i) {
                const uint16_t bits = FloatToBf16(normal(random));
                const float value = Bf16ToFloat(bits);
                if (bf16) {
                  std::memcpy(bytes.data() + i * element_bytes, &bits, 2);
                } else {
                  std::memcpy(bytes.data() + i * element_bytes, &value, 4);
                }
              }
              return bytes;
            };
            const std::vector<char> a_big = values(offset + a_rows * lda);
            const std::vector<char> b_big = values(offset + b_rows * ldb);
            std::vector<float> c_big(offset + m * ldc);
            for (float& value : c_big) value = normal(random);
            // Dense copies of the blocks.
            const auto dense = [&](const std::vector<char>& big, int rows,
                                   int row, int stride) {
              std::vector<char> block(rows * row * element_bytes);
              for (int r = 0; r < rows; ++r) {
                std::memcpy(block.data() + r * row * element_bytes,
                            big.data() + (offset + r * stride) * element_bytes,
                            row * element_bytes);
              }
              return block;
            };
            const std::vector<char> a_dense = dense(a_big, a_rows, a_row, lda);
            const std::vector<char> b_dense = dense(b_big, b_rows, b_row, ldb);
            std::vector<float> c_dense(m * n);
            for (int r = 0; r < m; ++r) {
              std::copy_n(c_big.begin() + offset + r * ldc, n,
                          c_dense.begin() + r * n);
            }
            const std::vector<float> c_before = c_big;
            ASSERT_TRUE((*matmul)
                            ->Run(m, k, n, a_dense.data(), b_dense.data(),
                                  c_dense.data())
                            .ok());
            ASSERT_TRUE((*matmul)
                            ->Run(m, k, n,
                                  a_big.data() + offset * element_bytes, lda,
                                  b_big.data() + offset * element_bytes, ldb,
                                  c_big.data() + offset, ldc)
                            .ok());
            for (int i = 0; i < static_cast<int>(c_big.size()); ++i) {
              const int r = (i - offset) / ldc, column = (i - offset) % ldc;
              if (i >= offset && column < n) {
                ASSERT_EQ(c_big[i], c_dense[r * n + column])
                    << "c[" << r << ", " << column << "]";
              } else {
                ASSERT_EQ(c_big[i], c_before[i]) << "outside the block: " << i;
              }
            }
          }
        }
      }
    }
  }
}

TEST(OneDnnMatmulTest, ALeadingDimensionShorterThanItsRowIsNamed) {
  MatmulLayout layout;
  layout.a_transposed = true;
  absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
      OneDnnMatmul::Create(layout);
  if (absl::IsUnimplemented(matmul.status())) GTEST_SKIP() << matmul.status();
  ASSERT_TRUE(matmul.ok()) << matmul.status();
  std::vector<uint16_t> a(64), b(64);
  std::vector<float> c(64);
  // a is stored [k, m] = [3, 4]: its leading dimension is at least 4.
  const absl::Status status =
      (*matmul)->Run(4, 3, 2, a.data(), 3, b.data(), 2, c.data(), 2);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "(a 3, b 2, c 2)")) << status;
  EXPECT_TRUE(
      (*matmul)->Run(4, 3, 2, a.data(), 4, b.data(), 2, c.data(), 2).ok());
}

TEST(OneDnnMatmulTest, Float32ForComparison) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // 2 x 3
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};  // 3 x 2
  MatmulLayout layout;
  layout.input = MatmulInput::kFloat32;
  absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
      OneDnnMatmul::Create(layout);
  if (absl::IsUnimplemented(matmul.status())) GTEST_SKIP() << matmul.status();
  ASSERT_TRUE(matmul.ok()) << matmul.status();
  std::vector<float> c(4);
  ASSERT_TRUE((*matmul)->Run(2, 3, 2, a.data(), b.data(), c.data()).ok());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  EXPECT_TRUE(absl::StartsWith((*matmul)->implementation(), "gemm:"))
      << (*matmul)->implementation();
}

TEST(OneDnnMatmulTest, ABadSizeIsNamed) {
  absl::StatusOr<std::unique_ptr<OneDnnMatmul>> matmul =
      OneDnnMatmul::Create(MatmulLayout());
  if (absl::IsUnimplemented(matmul.status())) GTEST_SKIP() << matmul.status();
  ASSERT_TRUE(matmul.ok()) << matmul.status();
  float c = 0;
  const absl::Status status = (*matmul)->Run(0, 3, 2, &c, &c, &c);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_TRUE(absl::StrContains(status.message(), "0 x 3 x 2"));
}

}  // namespace
}  // namespace plateau::kernels::cpu
