// For the bf16 tests of the model's blocks: seeded random values, and bf16
// values as their bits, rounded and widened by the CPU kernels' own
// conversions (kernels/cpu/bf16.h).
#ifndef PLATEAU_ENGINE_MODEL_BF16_TESTING_H_
#define PLATEAU_ENGINE_MODEL_BF16_TESTING_H_

#include <cstdint>
#include <vector>

#include "engine/memory/tensor.h"

namespace plateau::engine::testing {

using Bf16Bits = std::vector<uint16_t>;

// `count` normal values of mean 0 and standard deviation `scale`.
std::vector<float> RandomFloats(int64_t count, int seed, float scale);
// Each value rounded to bf16 (to nearest even).
Bf16Bits RoundedToBf16(const std::vector<float>& values);
// `count` bf16 values widened exactly.
std::vector<float> WidenedFromBf16(const uint16_t* bits, int64_t count);
// The bits of a bf16 tensor.
Bf16Bits BitsOf(const Tensor& tensor);

}  // namespace plateau::engine::testing

#endif  // PLATEAU_ENGINE_MODEL_BF16_TESTING_H_
