#include "kernels/cpu/bf16.h"

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

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

__attribute__((target("avx2,fma"))) void ConvertToBf16Avx2(int64_t count,
                                                           const float* from,
                                                           uint16_t* to) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i),
                     Bf16Bitsx8(_mm256_loadu_ps(from + i)));
  }
  for (; i < count; ++i) to[i] = FloatToBf16(from[i]);
}

__attribute__((target("avx2,fma"))) void WidenBf16Avx2(int64_t count,
                                                       const uint16_t* from,
                                                       float* to) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(to + i, WidenBf16x8(_mm_loadu_si128(
                                 reinterpret_cast<const __m128i*>(from + i))));
  }
  for (; i < count; ++i) to[i] = Bf16ToFloat(from[i]);
}

}  // namespace

void ConvertToBf16(absl::Span<const float> from, absl::Span<uint16_t> to) {
  const int64_t count = static_cast<int64_t>(from.size());
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      ConvertToBf16Avx512(count, from.data(), to.data());
      return;
    case SimdLevel::kAvx2:
      ConvertToBf16Avx2(count, from.data(), to.data());
      return;
    case SimdLevel::kScalar:
      break;
  }
  for (int64_t i = 0; i < count; ++i) to[i] = FloatToBf16(from[i]);
}

void WidenBf16(absl::Span<const uint16_t> from, absl::Span<float> to) {
  const int64_t count = static_cast<int64_t>(from.size());
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      WidenBf16Avx512(count, from.data(), to.data());
      return;
    case SimdLevel::kAvx2:
      WidenBf16Avx2(count, from.data(), to.data());
      return;
    case SimdLevel::kScalar:
      break;
  }
  for (int64_t i = 0; i < count; ++i) to[i] = Bf16ToFloat(from[i]);
}

void ConvertMatrixToBf16(int64_t rows, int64_t columns, const float* from,
                         int64_t from_stride, uint16_t* to, int64_t to_stride) {
  for (int64_t row = 0; row < rows; ++row) {
    ConvertToBf16(absl::MakeConstSpan(from + row * from_stride, columns),
                  absl::MakeSpan(to + row * to_stride, columns));
  }
}

void WidenBf16Matrix(int64_t rows, int64_t columns, const uint16_t* from,
                     int64_t from_stride, float* to, int64_t to_stride) {
  for (int64_t row = 0; row < rows; ++row) {
    WidenBf16(absl::MakeConstSpan(from + row * from_stride, columns),
              absl::MakeSpan(to + row * to_stride, columns));
  }
}

}  // namespace plateau::kernels::cpu
