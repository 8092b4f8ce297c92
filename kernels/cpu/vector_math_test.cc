#include "kernels/cpu/vector_math.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace plateau::kernels::cpu {
namespace {

std::vector<float> Uniform(int64_t count, float low, float high, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(rng);
  return values;
}

TEST(VectorMathTest, ExpIsAccurateOverItsRange) {
  for (float x = -87.0f; x <= 88.0f; x += 0.173f) {
    const double expected = std::exp(static_cast<double>(x));
    ASSERT_NEAR(ScalarExp(x), expected, 3e-7 * expected) << x;
  }
}

TEST(VectorMathTest, ExpAndSumMatchesFloat64) {
  // 37: vector body plus a tail at every SIMD width.
  const std::vector<float> x = Uniform(37, -20.0f, 5.0f, 1);
  std::vector<float> out(x.size());
  const float sum = ExpAndSum(x.size(), x.data(), 0.5f, 1.25f, out.data());
  double expected_sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = std::exp(0.5 * x[i] - 1.25);
    expected_sum += expected;
    ASSERT_NEAR(out[i], expected, 1e-6 * expected) << i;
  }
  EXPECT_NEAR(sum, expected_sum, 1e-6 * expected_sum);
}

TEST(VectorMathTest, MaxFindsTheLargestAnywhere) {
  for (int64_t count : {1, 7, 16, 17, 100}) {
    std::vector<float> x = Uniform(count, -5.0f, 5.0f, 2);
    for (int64_t position = 0; position < count; ++position) {
      std::vector<float> copy = x;
      copy[position] = 10.0f;
      ASSERT_EQ(VectorMax(count, copy.data()), 10.0f)
          << count << " " << position;
    }
  }
  EXPECT_EQ(VectorMax(0, nullptr), -INFINITY);
}

TEST(VectorMathTest, SumOfSquaresIsFloat64EvenBeyondFloatRange) {
  // Every count to 100: vector bodies and every tail length at each width.
  for (int64_t count = 0; count <= 100; ++count) {
    std::vector<float> x = Uniform(count, -1.0f, 1.0f, 6);
    // Around 1e20: each square (about 1e40) is above FLT_MAX.
    for (float& value : x) value *= 1e20f;
    long double expected = 0;
    for (float value : x) expected += static_cast<long double>(value) * value;
    const double sum = SumOfSquaresF64(count, x.data());
    ASSERT_TRUE(std::isfinite(sum)) << count;
    ASSERT_NEAR(sum, static_cast<double>(expected),
                1e-14 * static_cast<double>(expected))
        << count;
  }
  EXPECT_EQ(SumOfSquaresF64(0, nullptr), 0.0);
}

TEST(VectorMathTest, SiluMultiplyAndItsBackwardMatchFloat64) {
  const std::vector<float> gate = Uniform(45, -10.0f, 10.0f, 3);
  const std::vector<float> up = Uniform(45, -2.0f, 2.0f, 4);
  const std::vector<float> dout = Uniform(45, -1.0f, 1.0f, 5);
  std::vector<float> out(45), dgate(45), dup(45);
  SiluMultiply(45, gate.data(), up.data(), out.data());
  SiluMultiplyBackward(45, gate.data(), up.data(), dout.data(), dgate.data(),
                       dup.data());
  for (int i = 0; i < 45; ++i) {
    const double g = gate[i];
    const double s = 1.0 / (1.0 + std::exp(-g));
    ASSERT_NEAR(out[i], g * s * up[i], 1e-5 * (1 + std::abs(g * s * up[i])));
    const double expected_dgate = dout[i] * up[i] * (s + g * s * (1 - s));
    ASSERT_NEAR(dgate[i], expected_dgate,
                1e-5 * (1 + std::abs(expected_dgate)));
    ASSERT_NEAR(dup[i], dout[i] * g * s,
                1e-5 * (1 + std::abs(dout[i] * g * s)));
  }
}

}  // namespace
}  // namespace plateau::kernels::cpu
