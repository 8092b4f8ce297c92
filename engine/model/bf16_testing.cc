#include "engine/model/bf16_testing.h"

#include <random>

#include "absl/types/span.h"
#include "kernels/cpu/bf16.h"

namespace plateau::engine::testing {

std::vector<float> RandomFloats(int64_t count, int seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

Bf16Bits RoundedToBf16(const std::vector<float>& values) {
  Bf16Bits bits(values.size());
  kernels::cpu::ConvertToBf16(values, absl::MakeSpan(bits));
  return bits;
}

std::vector<float> WidenedFromBf16(const uint16_t* bits, int64_t count) {
  std::vector<float> values(count);
  kernels::cpu::WidenBf16(absl::MakeConstSpan(bits, count),
                          absl::MakeSpan(values));
  return values;
}

Bf16Bits BitsOf(const Tensor& tensor) {
  return Bf16Bits(tensor.bf16(), tensor.bf16() + tensor.elements());
}

}  // namespace plateau::engine::testing
