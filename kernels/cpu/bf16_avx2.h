// bf16 conversions on 8 values in AVX2 registers, bit for bit the scalar
// ones of bf16.h (to nearest even; NaN kept a quiet NaN), for the kernels
// that convert as they go. Callers are compiled for AVX2 (the functions
// are, with target attributes) and run only where DetectedSimdLevel allows.
#ifndef PLATEAU_KERNELS_CPU_BF16_AVX2_H_
#define PLATEAU_KERNELS_CPU_BF16_AVX2_H_

#include "kernels/cpu/intrinsics.h"

namespace plateau::kernels::cpu {

// Each value rounded to bf16 and kept as a float32 (its low 16 bits zero).
__attribute__((target("avx2,fma"))) inline __m256 RoundedBf16x8(__m256 value) {
  const __m256i bits = _mm256_castps_si256(value);
  const __m256i odd =
      _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i rounded = _mm256_and_si256(
      _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)),
      high);
  const __m256i quiet = _mm256_and_si256(
      _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000)), high);
  const __m256 nan = _mm256_cmp_ps(value, value, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm256_castsi256_ps(rounded),
                          _mm256_castsi256_ps(quiet), nan);
}

// The bf16 bits of 8 values (RoundToBf16Avx2's upper halves), in order.
__attribute__((target("avx2,fma"))) inline __m128i Bf16Bitsx8(__m256 value) {
  const __m256i upper =
      _mm256_srli_epi32(_mm256_castps_si256(RoundedBf16x8(value)), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(upper),
                          _mm256_extracti128_si256(upper, 1));
}

// 8 bf16 values widened exactly.
__attribute__((target("avx2,fma"))) inline __m256 WidenBf16x8(__m128i bf16) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_BF16_AVX2_H_
