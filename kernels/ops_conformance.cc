#include "kernels/ops_conformance.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace plateau::kernels::conformance {

std::string ConformanceBackendName(
    const ::testing::TestParamInfo<ConformanceBackendFactory>& info) {
  return info.param.name;
}

void PrintTo(const ConformanceBackendFactory& factory, std::ostream* stream) {
  *stream << factory.name;
}

Floats RandomFloats(int64_t count, int seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Floats values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

Ints RandomInts(int64_t count, int32_t limit, int seed) {
  std::mt19937 rng(seed);
  Ints values(count);
  for (int32_t& value : values) value = static_cast<int32_t>(rng() % limit);
  return values;
}

Doubles ToDoubles(const Floats& values) {
  return Doubles(values.begin(), values.end());
}

uint16_t ToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

Bf16s ToBf16(const Floats& values) {
  Bf16s rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) rounded[i] = ToBf16(values[i]);
  return rounded;
}

float FromBf16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float widened;
  std::memcpy(&widened, &bits, sizeof(bits));
  return widened;
}

Floats FromBf16(const Bf16s& values) {
  Floats widened(values.size());
  for (size_t i = 0; i < values.size(); ++i) widened[i] = FromBf16(values[i]);
  return widened;
}

void ExpectClose(const Floats& actual, const Doubles& expected,
                 double tolerance, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i],
                tolerance * (1.0 + std::abs(expected[i])))
        << what << " at " << i;
  }
}

void ExpectSame(const Floats& actual, const Floats& expected,
                const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_EQ(actual[i], expected[i]) << what << " at " << i;
  }
}

std::vector<size_t> SampleCoordinates(size_t count, size_t samples, int seed) {
  std::vector<size_t> all(count);
  std::iota(all.begin(), all.end(), 0);
  if (count <= samples) return all;
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(samples);
  std::sort(all.begin(), all.end());
  return all;
}

Doubles NumericGradient(const std::function<Doubles(const Doubles&)>& f,
                        Doubles x, const Doubles& weights,
                        const std::vector<size_t>& coordinates) {
  const double step = 1e-6;
  Doubles gradient;
  for (size_t j : coordinates) {
    const double saved = x[j];
    x[j] = saved + step;
    const Doubles plus = f(x);
    x[j] = saved - step;
    const Doubles minus = f(x);
    x[j] = saved;
    double difference = 0.0;
    for (size_t i = 0; i < plus.size(); ++i) {
      difference += weights[i] * (plus[i] - minus[i]);
    }
    gradient.push_back(difference / (2 * step));
  }
  return gradient;
}

void ExpectGradient(const Floats& analytic, const Doubles& numeric,
                    const std::vector<size_t>& coordinates, double tolerance,
                    const char* what) {
  for (size_t i = 0; i < coordinates.size(); ++i) {
    ASSERT_NEAR(analytic[coordinates[i]], numeric[i],
                tolerance * (1.0 + std::abs(numeric[i])))
        << what << " at " << coordinates[i];
  }
}

void OpsConformanceTest::SetUp() {
  absl::StatusOr<std::unique_ptr<ConformanceBackend>> backend =
      GetParam().make();
  if (absl::IsFailedPrecondition(backend.status())) {
    GTEST_SKIP() << backend.status();
  }
  ASSERT_TRUE(backend.ok()) << backend.status();
  backend_ = *std::move(backend);
}

void OpsConformanceTest::TearDown() {
  if (backend_ == nullptr) return;
  const absl::Status finished = backend_->Finish();
  EXPECT_TRUE(finished.ok()) << finished;
}

}  // namespace plateau::kernels::conformance
