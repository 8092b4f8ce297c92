#include "engine/model/initial_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/random.h"

namespace plateau::engine {
namespace {

// SplitMix64's increment: SplitMix64(seed + k * kGamma) is the (k + 1)-th
// output of the sequential splitmix64 generator seeded with `seed`.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

// FNV-1a: a parameter's stream comes from its name, not its position, so
// that every sharding of the model draws the same values.
uint64_t NameHash(const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  }
  return hash;
}

// Box-Muller on SplitMix64, specified here rather than by the standard
// library so that initial weights are the same with any toolchain. Elements
// 2j and 2j + 1 of the whole tensor are the cosine and sine of the pair drawn
// from counters 2j, 2j + 1 of `stream`; values[i] is element first + i.
void FillNormal(uint64_t stream, float std, int64_t first, int64_t count,
                float* values) {
  constexpr double kTwoPi = 6.283185307179586;
  int64_t i = 0;
  while (i < count) {
    const uint64_t element = static_cast<uint64_t>(first + i);
    const uint64_t pair = element & ~uint64_t{1};
    const uint64_t bits1 = SplitMix64(stream + pair * kGamma);
    const uint64_t bits2 = SplitMix64(stream + (pair + 1) * kGamma);
    const double u1 =
        (static_cast<double>(bits1 >> 11) + 1.0) * 0x1.0p-53;        // (0, 1]
    const double u2 = static_cast<double>(bits2 >> 11) * 0x1.0p-53;  // [0, 1)
    const double radius = std * std::sqrt(-2.0 * std::log(u1));
    const double angle = kTwoPi * u2;
    if (element % 2 == 0)
      values[i++] = static_cast<float>(radius * std::cos(angle));
    if (i < count) values[i++] = static_cast<float>(radius * std::sin(angle));
  }
}

}  // namespace

void InitialWeights(uint64_t seed, const ParameterInfo& info, int64_t first,
                    int64_t count, float* values) {
  if (info.init_std > 0.0f) {
    const uint64_t stream = SplitMix64((seed * kGamma) ^ NameHash(info.name));
    FillNormal(stream, info.init_std, first, count, values);
    return;
  }
  std::fill_n(values, count,
              info.role == ParameterRole::kExpertBias ? 0.0f : 1.0f);
}

}  // namespace plateau::engine
