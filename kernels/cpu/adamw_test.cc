#include "kernels/cpu/adamw.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace plateau::kernels::cpu {
namespace {

struct AdamWState {
  std::vector<float> params, grads, m, v;
};

AdamWState RandomState(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AdamWState s;
  for (int64_t i = 0; i < count; ++i) {
    s.params.push_back(normal(rng));
    s.grads.push_back(0.1f * normal(rng));
    s.m.push_back(0.01f * normal(rng));
    s.v.push_back(1e-4f * std::abs(normal(rng)));
  }
  return s;
}

// The update of kernels/adamw.h written out in float64, straight from the
// hyperparameters (no precomputed coefficients).
void ReferenceAdamW(const AdamWHyperparameters& h, std::vector<double>* p,
                    const std::vector<float>& g, std::vector<double>* m,
                    std::vector<double>* v) {
  const double correction1 = 1.0 - std::pow(double{h.beta1}, h.step);
  const double correction2 = 1.0 - std::pow(double{h.beta2}, h.step);
  for (size_t i = 0; i < p->size(); ++i) {
    (*p)[i] *= 1.0 - double{h.learning_rate} * h.weight_decay;
    (*m)[i] = h.beta1 * (*m)[i] + (1.0 - h.beta1) * g[i];
    (*v)[i] = h.beta2 * (*v)[i] + (1.0 - h.beta2) * double{g[i]} * g[i];
    const double m_hat = (*m)[i] / correction1;
    const double v_hat = (*v)[i] / correction2;
    (*p)[i] -= h.learning_rate * m_hat / (std::sqrt(v_hat) + h.epsilon);
  }
}

class AdamWTest : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(AdamWTest, MatchesFloat64ReferenceOverSeveralSteps) {
  if (!SimdLevelSupported(GetParam())) GTEST_SKIP() << "CPU lacks this level";
  // 1037: not a multiple of any vector width, so the scalar tail runs too.
  constexpr int64_t kCount = 1037;
  AdamWState state = RandomState(kCount, 7);
  std::vector<double> p(state.params.begin(), state.params.end());
  std::vector<double> m(state.m.begin(), state.m.end());
  std::vector<double> v(state.v.begin(), state.v.end());
  AdamWHyperparameters hyper;
  hyper.learning_rate = 3e-3f;
  hyper.beta1 = 0.9f;
  hyper.beta2 = 0.95f;
  hyper.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 5; ++step) {
    hyper.step = step;
    AdamWUpdateAt(GetParam(), ComputeAdamWCoefficients(hyper), kCount,
                  state.params.data(), state.grads.data(), state.m.data(),
                  state.v.data());
    ReferenceAdamW(hyper, &p, state.grads, &m, &v);
  }
  for (int64_t i = 0; i < kCount; ++i) {
    ASSERT_NEAR(state.params[i], p[i], 1e-6 + 1e-5 * std::abs(p[i])) << i;
    ASSERT_NEAR(state.m[i], m[i], 1e-7 + 1e-5 * std::abs(m[i])) << i;
    ASSERT_NEAR(state.v[i], v[i], 1e-9 + 1e-5 * std::abs(v[i])) << i;
  }
}

TEST_P(AdamWTest, ZeroCountTouchesNothing) {
  if (!SimdLevelSupported(GetParam())) GTEST_SKIP() << "CPU lacks this level";
  AdamWState state = RandomState(4, 3);
  const AdamWState before = state;
  AdamWUpdateAt(GetParam(), ComputeAdamWCoefficients({}), 0,
                state.params.data(), state.grads.data(), state.m.data(),
                state.v.data());
  EXPECT_EQ(state.params, before.params);
  EXPECT_EQ(state.m, before.m);
}

// Every level must round exactly as the others: the scalar loop (the whole
// update at kScalar, the tails elsewhere) uses fma where the vector loops do.
TEST(AdamWLevelsTest, AllLevelsGiveBitwiseIdenticalParamsAndMoments) {
  // 1037 = 64 * 16 + 13: every vector width leaves a tail.
  constexpr int64_t kCount = 1037;
  AdamWState initial = RandomState(kCount, 11);
  // Gradients over many magnitudes, so that a second rounding would show.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-12.0f, 2.0f);
  for (float& g : initial.grads) g *= std::pow(10.0f, exponent(rng));
  AdamWHyperparameters hyper;
  hyper.learning_rate = 3e-3f;
  hyper.beta1 = 0.9f;
  hyper.beta2 = 0.95f;
  hyper.weight_decay = 0.1f;
  auto run = [&](SimdLevel level) {
    AdamWState state = initial;
    for (int64_t step = 1; step <= 5; ++step) {
      hyper.step = step;
      AdamWUpdateAt(level, ComputeAdamWCoefficients(hyper), kCount,
                    state.params.data(), state.grads.data(), state.m.data(),
                    state.v.data());
    }
    return state;
  };
  auto expect_bitwise_equal = [](const std::vector<float>& actual,
                                 const std::vector<float>& expected,
                                 const char* what, SimdLevel level) {
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      ASSERT_EQ(std::memcmp(&actual[i], &expected[i], sizeof(float)), 0)
          << what << "[" << i << "] at " << SimdLevelName(level) << ": "
          << actual[i] << " vs scalar " << expected[i];
    }
  };
  const AdamWState scalar = run(SimdLevel::kScalar);
  int levels_compared = 0;
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!SimdLevelSupported(level)) continue;
    const AdamWState vector = run(level);
    expect_bitwise_equal(vector.params, scalar.params, "params", level);
    expect_bitwise_equal(vector.m, scalar.m, "first_moment", level);
    expect_bitwise_equal(vector.v, scalar.v, "second_moment", level);
    ++levels_compared;
  }
  if (levels_compared == 0) GTEST_SKIP() << "CPU has no vector level";
}

INSTANTIATE_TEST_SUITE_P(AllLevels, AdamWTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512),
                         [](const auto& info) {
                           return std::string(SimdLevelName(info.param));
                         });

}  // namespace
}  // namespace plateau::kernels::cpu
