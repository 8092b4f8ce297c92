#include "kernels/cpu/bf16_speedup.h"

#include <cmath>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::kernels::cpu {
namespace {

// A ratio of two measured times: positive and finite. Where oneDNN has a
// bf16 kernel it uses AVX-512 BF16 or AMX, 3-4x float32's products; where
// it has none, the fixed-order kernel makes the same float32 arithmetic on
// rounded values and cannot be twice as fast.
TEST(Bf16SpeedupTest, IsARatioOfTimes) {
  const double speedup = MeasureBf16ProductSpeedup();
  EXPECT_GT(speedup, 0.0);
  EXPECT_TRUE(std::isfinite(speedup));
  CpuOps ops(1);
  if (ops.Matmul(MatmulLayout{}) == nullptr) {
    EXPECT_LT(speedup, 2.0);
  }
}

}  // namespace
}  // namespace plateau::kernels::cpu
