#include "kernels/cpu/bf16.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

// A square tile of the transposing conversion: both its reads and its writes
// stay within a few cache lines per row.
constexpr int64_t kTransposeTile = 32;

// FloatToBf16 on 16 floats, bit for bit (integer arithmetic: the
// AVX512_BF16 conversion flushes subnormals, which the scalar one keeps).
__attribute__((target("avx512f,avx512bw"))) __m256i RoundToBf16x16(
    __m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i odd =
      _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)),
      16);
  const __mmask16 nan = _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
  rounded = _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(bits, 16),
                                 _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(rounded);
}

__attribute__((target("avx512f,avx512bw"))) void ConvertToBf16Avx512(
    int64_t count, const float* from, uint16_t* to) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i),
                        RoundToBf16x16(_mm512_loadu_ps(from + i)));
  }
  for (; i < count; ++i) to[i] = FloatToBf16(from[i]);
}

// Bf16ToFloat on 16 values at a time: the bits shifted into place.
__attribute__((target("avx512f,avx512bw"))) void WidenBf16Avx512(
    int64_t count, const uint16_t* from, float* to) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i wide = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i)));
    _mm512_storeu_ps(to + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
  for (; i < count; ++i) to[i] = Bf16ToFloat(from[i]);
}

// The 16 x 16 matrix of 16-bit values whose rows are `rows`, transposed:
// pairs, then quads, then octets of rows interleaved within each 128-bit
// lane, then the lanes exchanged.
__attribute__((target("avx2"))) void Transpose16x16(const __m256i rows[16],
                                                    __m256i columns[16]) {
  __m256i pairs[16], quads[16], octets[16];
  for (int i = 0; i < 8; ++i) {
    pairs[2 * i] = _mm256_unpacklo_epi16(rows[2 * i], rows[2 * i + 1]);
    pairs[2 * i + 1] = _mm256_unpackhi_epi16(rows[2 * i], rows[2 * i + 1]);
  }
  // quads[4 g + p]: rows 4g..4g+3 of columns 2p, 2p + 1 (and 8 on).
  for (int g = 0; g < 4; ++g) {
    quads[4 * g] = _mm256_unpacklo_epi32(pairs[4 * g], pairs[4 * g + 2]);
    quads[4 * g + 1] = _mm256_unpackhi_epi32(pairs[4 * g], pairs[4 * g + 2]);
    quads[4 * g + 2] =
        _mm256_unpacklo_epi32(pairs[4 * g + 1], pairs[4 * g + 3]);
    quads[4 * g + 3] =
        _mm256_unpackhi_epi32(pairs[4 * g + 1], pairs[4 * g + 3]);
  }
  // octets[8 h + j]: rows 8h..8h+7 of column j (low lane) and j + 8.
  for (int h = 0; h < 2; ++h) {
    for (int p = 0; p < 4; ++p) {
      octets[8 * h + 2 * p] =
          _mm256_unpacklo_epi64(quads[8 * h + p], quads[8 * h + 4 + p]);
      octets[8 * h + 2 * p + 1] =
          _mm256_unpackhi_epi64(quads[8 * h + p], quads[8 * h + 4 + p]);
    }
  }
  for (int j = 0; j < 8; ++j) {
    columns[j] = _mm256_permute2x128_si256(octets[j], octets[8 + j], 0x20);
    columns[j + 8] = _mm256_permute2x128_si256(octets[j], octets[8 + j], 0x31);
  }
}

// to[column * to_stride + row] = convert(from[row * from_stride + column]),
// tile by tile.
template <typename In, typename Out, typename Convert>
void ConvertTransposed(int64_t rows, int64_t columns, const In* from,
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

// One row of 16 values of a tile, as bf16: converted, or as they are.
struct FloatRowToBf16 {
  __attribute__((target("avx512f,avx512bw"))) __m256i operator()(
      const float* row) const {
    return RoundToBf16x16(_mm512_loadu_ps(row));
  }
};
struct Bf16Row {
  __attribute__((target("avx2"))) __m256i operator()(
      const uint16_t* row) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
  }
};

// The transposing conversion of a [rows, columns] matrix whose sizes are
// multiples of 16, a 16 x 16 tile at a time.
template <typename In, typename LoadRow>
__attribute__((target("avx512f,avx512bw"))) void TransposeTiles(
    int64_t rows, int64_t columns, const In* from, int64_t from_stride,
    uint16_t* to, int64_t to_stride, LoadRow load_row) {
  __m256i tile[16], transposed[16];
  for (int64_t row = 0; row < rows; row += 16) {
    for (int64_t column = 0; column < columns; column += 16) {
      for (int i = 0; i < 16; ++i) {
        tile[i] = load_row(from + (row + i) * from_stride + column);
      }
      Transpose16x16(tile, transposed);
      for (int j = 0; j < 16; ++j) {
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(to + (column + j) * to_stride + row),
            transposed[j]);
      }
    }
  }
}

// to[column * to_stride + row] = convert(from[row * from_stride + column]):
// whole 16 x 16 tiles vectorised where the CPU has AVX-512, the edges (and
// everything elsewhere) by ConvertTransposed.
template <typename In, typename Convert, typename LoadRow>
void TransposeToBf16(int64_t rows, int64_t columns, const In* from,
                     int64_t from_stride, uint16_t* to, int64_t to_stride,
                     Convert convert, LoadRow load_row) {
  const bool vectorised = DetectedSimdLevel() == SimdLevel::kAvx512;
  const int64_t tiled_rows = vectorised ? rows / 16 * 16 : 0;
  const int64_t tiled_columns = tiled_rows > 0 ? columns / 16 * 16 : 0;
  if (tiled_columns > 0) {
    TransposeTiles(tiled_rows, tiled_columns, from, from_stride, to, to_stride,
                   load_row);
  }
  // The columns right of the tiles, in every row; the rows below them.
  ConvertTransposed(rows, columns - tiled_columns, from + tiled_columns,
                    from_stride, to + tiled_columns * to_stride, to_stride,
                    convert);
  ConvertTransposed(rows - tiled_rows, tiled_columns,
                    from + tiled_rows * from_stride, from_stride,
                    to + tiled_rows, to_stride, convert);
}

}  // namespace

void ConvertToBf16(absl::Span<const float> from, absl::Span<uint16_t> to) {
  if (DetectedSimdLevel() == SimdLevel::kAvx512) {
    ConvertToBf16Avx512(static_cast<int64_t>(from.size()), from.data(),
                        to.data());
    return;
  }
  for (size_t i = 0; i < from.size(); ++i) to[i] = FloatToBf16(from[i]);
}

void WidenBf16(absl::Span<const uint16_t> from, absl::Span<float> to) {
  if (DetectedSimdLevel() == SimdLevel::kAvx512) {
    WidenBf16Avx512(static_cast<int64_t>(from.size()), from.data(), to.data());
    return;
  }
  for (size_t i = 0; i < from.size(); ++i) to[i] = Bf16ToFloat(from[i]);
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
  TransposeToBf16(
      rows, columns, from, from_stride, to, to_stride,
      [](float value) { return FloatToBf16(value); }, FloatRowToBf16());
}

void CopyBf16Matrix(int64_t rows, int64_t columns, const uint16_t* from,
                    int64_t from_stride, bool transpose, uint16_t* to,
                    int64_t to_stride) {
  if (!transpose) {
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(to + row * to_stride, from + row * from_stride,
                  columns * sizeof(uint16_t));
    }
    return;
  }
  TransposeToBf16(
      rows, columns, from, from_stride, to, to_stride,
      [](uint16_t value) { return value; }, Bf16Row());
}

void WidenBf16Matrix(int64_t rows, int64_t columns, const uint16_t* from,
                     int64_t from_stride, bool transpose, float* to,
                     int64_t to_stride) {
  if (!transpose) {
    const bool avx512 = DetectedSimdLevel() == SimdLevel::kAvx512;
    for (int64_t row = 0; row < rows; ++row) {
      const uint16_t* from_row = from + row * from_stride;
      float* to_row = to + row * to_stride;
      if (avx512) {
        WidenBf16Avx512(columns, from_row, to_row);
        continue;
      }
      for (int64_t column = 0; column < columns; ++column) {
        to_row[column] = Bf16ToFloat(from_row[column]);
      }
    }
    return;
  }
  ConvertTransposed(rows, columns, from, from_stride, to, to_stride,
                    [](uint16_t value) { return Bf16ToFloat(value); });
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
