// bfloat16 on the CPU: a float32's upper 16 bits, rounded to nearest even
// (NaN stays a quiet NaN), and the conversions the mixed-precision matrix
// products make of their float32 operands. Vectorised where the CPU allows
// (DetectedSimdLevel: AVX-512 or AVX2), bit for bit the scalar rounding.
#ifndef PLATEAU_KERNELS_CPU_BF16_H_
#define PLATEAU_KERNELS_CPU_BF16_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/types/span.h"

namespace plateau::kernels::cpu {

// Inline: the kernels call them per element.
inline uint16_t FloatToBf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);  // to nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
inline float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result = 0;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// A stored value as float32: itself, or a bf16's exact widening (for
// kernels written once over both storage types).
inline float ValueOf(float value) { return value; }
inline float ValueOf(uint16_t value) { return Bf16ToFloat(value); }

// REQUIRES: to.size() == from.size().
void ConvertToBf16(absl::Span<const float> from, absl::Span<uint16_t> to);
// Exactly. REQUIRES: to.size() == from.size().
void WidenBf16(absl::Span<const uint16_t> from, absl::Span<float> to);

// A row of `dim` stored values as float32: the row itself, or a bf16 row
// widened (exactly) into `widened`, which holds it until the next call.
inline const float* RowValues(const float* row, int64_t /*dim*/,
                              std::vector<float>& /*widened*/) {
  return row;
}
inline const float* RowValues(const uint16_t* row, int64_t dim,
                              std::vector<float>& widened) {
  widened.resize(dim);
  WidenBf16(absl::MakeConstSpan(row, dim), absl::MakeSpan(widened));
  return widened.data();
}

// The [rows, columns] matrix at `from` (row stride from_stride) as bf16 at
// `to` (row stride to_stride).
void ConvertMatrixToBf16(int64_t rows, int64_t columns, const float* from,
                         int64_t from_stride, uint16_t* to, int64_t to_stride);
// A bf16 matrix widened to float32 (exactly), likewise: bf16 operands of a
// bf16 product, for float32 kernels.
void WidenBf16Matrix(int64_t rows, int64_t columns, const uint16_t* from,
                     int64_t from_stride, float* to, int64_t to_stride);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_BF16_H_
