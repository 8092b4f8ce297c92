#include "kernels/cpu/bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

// A square tile of the transposing conversion: both its reads and its writes
// stay within a few cache lines per row.
constexpr int64_t kTransposeTile = 32;

// FloatToBf16 on 16 floats at a time, bit for bit.
__attribute__((target("avx512f,avx512bw"))) void ConvertToBf16Avx512(
    int64_t count, const float* from, uint16_t* to) {
  const __m512i low_bit = _mm512_set1_epi32(1);
  const __m512i rounding = _mm512_set1_epi32(0x7fff);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 value = _mm512_loadu_ps(from + i);
    const __m512i bits = _mm512_castps_si512(value);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), low_bit);
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(rounding, odd)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
    rounded =
        _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(bits, 16), quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i),
                        _mm512_cvtepi32_epi16(rounded));
  }
  for (; i < count; ++i) to[i] = FloatToBf16(from[i]);
}

// to[column * to_stride + row] = convert(from[row * from_stride + column]),
// tile by tile.
template <typename Out, typename Convert>
void ConvertTransposed(int64_t rows, int64_t columns, const float* from,
                       int64_t from_stride, Out* to, int64_t to_stride,
                       Convert convert) {
  for (int64_t row_tile = 0; row_tile < rows; row_tile += kTransposeTile) {
    const int64_t row_end = std::min(rows, row_tile + kTransposeTile);
    for (int64_t column_tile = 0; column_tile < columns;
         column_tile += kTransposeTile) {
      const int64_t column_end =
          std::min(columns, column_tile + kTransposeTile);
      for (int64_t column = column_tile; column < column_end; ++column) {
        for (int64_t row = row_tile; row < row_end; ++row) {
          to[column * to_stride + row] =
              convert(from[row * from_stride + column]);
        }
      }
    }
  }
}

}  // namespace

uint16_t FloatToBf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);  // to nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result = 0;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

void ConvertToBf16(absl::Span<const float> from, absl::Span<uint16_t> to) {
  if (DetectedSimdLevel() == SimdLevel::kAvx512) {
    ConvertToBf16Avx512(static_cast<int64_t>(from.size()), from.data(),
                        to.data());
    return;
  }
  for (size_t i = 0; i < from.size(); ++i) to[i] = FloatToBf16(from[i]);
}

void ConvertMatrixToBf16(int64_t rows, int64_t columns, const float* from,
                         int64_t from_stride, bool transpose, uint16_t* to,
                         int64_t to_stride) {
  if (!transpose) {
    for (int64_t row = 0; row < rows; ++row) {
      ConvertToBf16(absl::MakeConstSpan(from + row * from_stride, columns),
                    absl::MakeSpan(to + row * to_stride, columns));
    }
    return;
  }
  ConvertTransposed(rows, columns, from, from_stride, to, to_stride,
                    [](float value) { return FloatToBf16(value); });
}

void RoundMatrixToBf16(int64_t rows, int64_t columns, const float* from,
                       int64_t from_stride, bool transpose, float* to,
                       int64_t to_stride) {
  const auto round = [](float value) {
    return Bf16ToFloat(FloatToBf16(value));
  };
  if (!transpose) {
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t column = 0; column < columns; ++column) {
        to[row * to_stride + column] = round(from[row * from_stride + column]);
      }
    }
    return;
  }
  ConvertTransposed(rows, columns, from, from_stride, to, to_stride, round);
}

}  // namespace plateau::kernels::cpu
