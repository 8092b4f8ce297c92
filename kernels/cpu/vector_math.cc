#include "kernels/cpu/vector_math.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

// Cephes expf: exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2
// (ln 2 split in two for precision), exp(r) by a degree-7 polynomial.
constexpr float kExpLow = -87.0f;
constexpr float kExpHigh = 88.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693359375f;
constexpr float kLn2Low = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f;
constexpr float kP1 = 1.3981999507e-3f;
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;

__attribute__((target("avx512f"))) inline __m512 Exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpLow)),
                    _mm512_set1_ps(kExpHigh));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

__attribute__((target("avx2,fma"))) inline __m256 Exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpLow)),
                    _mm256_set1_ps(kExpHigh));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i exponent = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// ---- Max ----
float MaxScalar(int64_t count, const float* x) {
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < count; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

__attribute__((target("avx512f"))) float MaxAvx512(int64_t count,
                                                   const float* x) {
  __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    best = _mm512_max_ps(best, _mm512_loadu_ps(x + i));
  }
  const float tail = MaxScalar(count - i, x + i);
  const float head = _mm512_reduce_max_ps(best);
  return head > tail ? head : tail;
}

__attribute__((target("avx2,fma"))) float MaxAvx2(int64_t count,
                                                  const float* x) {
  __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    best = _mm256_max_ps(best, _mm256_loadu_ps(x + i));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, best);
  float result = MaxScalar(count - i, x + i);
  for (float lane : lanes) result = lane > result ? lane : result;
  return result;
}

// ---- exp and sum ----
float ExpAndSumScalar(int64_t count, const float* x, float scale, float shift,
                      float* out) {
  float sum = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    out[i] = ScalarExp(scale * x[i] - shift);
    sum += out[i];
  }
  return sum;
}

__attribute__((target("avx512f"))) float ExpAndSumAvx512(
    int64_t count, const float* x, float scale, float shift, float* out) {
  const __m512 scale_vector = _mm512_set1_ps(scale);
  const __m512 shift_vector = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 e = Exp512(
        _mm512_fmsub_ps(scale_vector, _mm512_loadu_ps(x + i), shift_vector));
    _mm512_storeu_ps(out + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (i < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1);
    const __m512 e = Exp512(_mm512_fmsub_ps(
        scale_vector, _mm512_maskz_loadu_ps(mask, x + i), shift_vector));
    _mm512_mask_storeu_ps(out + i, mask, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mask, e));
  }
  return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) float ExpAndSumAvx2(
    int64_t count, const float* x, float scale, float shift, float* out) {
  const __m256 scale_vector = _mm256_set1_ps(scale);
  const __m256 shift_vector = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 e = Exp256(
        _mm256_fmsub_ps(scale_vector, _mm256_loadu_ps(x + i), shift_vector));
    _mm256_storeu_ps(out + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = ExpAndSumScalar(count - i, x + i, scale, shift, out + i);
  for (float lane : lanes) total += lane;
  return total;
}

// ---- SiLU ----
void SiluMultiplyScalar(int64_t count, const float* gate, const float* up,
                        float* out) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = gate[i] / (1.0f + ScalarExp(-gate[i])) * up[i];
  }
}

__attribute__((target("avx512f"))) void SiluMultiplyAvx512(int64_t count,
                                                           const float* gate,
                                                           const float* up,
                                                           float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 sigmoid = _mm512_div_ps(
        one, _mm512_add_ps(one, Exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid),
                                            _mm512_loadu_ps(up + i)));
  }
  SiluMultiplyScalar(count - i, gate + i, up + i, out + i);
}

__attribute__((target("avx2,fma"))) void SiluMultiplyAvx2(int64_t count,
                                                          const float* gate,
                                                          const float* up,
                                                          float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 sigmoid = _mm256_div_ps(
        one, _mm256_add_ps(one, Exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid),
                                            _mm256_loadu_ps(up + i)));
  }
  SiluMultiplyScalar(count - i, gate + i, up + i, out + i);
}

// silu'(g) = s * (1 + g * (1 - s)) with s = sigmoid(g).
void SiluMultiplyBackwardScalar(int64_t count, const float* gate,
                                const float* up, const float* dout,
                                float* dgate, float* dup) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    const float s = 1.0f / (1.0f + ScalarExp(-g));
    const float silu = g * s;
    const float d = dout[i];
    dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
    dup[i] = d * silu;
  }
}

__attribute__((target("avx512f"))) void SiluMultiplyBackwardAvx512(
    int64_t count, const float* gate, const float* up, const float* dout,
    float* dgate, float* dup) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 s = _mm512_div_ps(
        one, _mm512_add_ps(one, Exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    const __m512 d = _mm512_loadu_ps(dout + i);
    const __m512 derivative =
        _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one));
    _mm512_storeu_ps(
        dgate + i,
        _mm512_mul_ps(_mm512_mul_ps(d, _mm512_loadu_ps(up + i)), derivative));
    _mm512_storeu_ps(dup + i, _mm512_mul_ps(d, _mm512_mul_ps(g, s)));
  }
  SiluMultiplyBackwardScalar(count - i, gate + i, up + i, dout + i, dgate + i,
                             dup + i);
}

__attribute__((target("avx2,fma"))) void SiluMultiplyBackwardAvx2(
    int64_t count, const float* gate, const float* up, const float* dout,
    float* dgate, float* dup) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 s = _mm256_div_ps(
        one, _mm256_add_ps(one, Exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    const __m256 d = _mm256_loadu_ps(dout + i);
    const __m256 derivative =
        _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one));
    _mm256_storeu_ps(
        dgate + i,
        _mm256_mul_ps(_mm256_mul_ps(d, _mm256_loadu_ps(up + i)), derivative));
    _mm256_storeu_ps(dup + i, _mm256_mul_ps(d, _mm256_mul_ps(g, s)));
  }
  SiluMultiplyBackwardScalar(count - i, gate + i, up + i, dout + i, dgate + i,
                             dup + i);
}

// ---- Sum of squares in float64 ----
// A float's square is exact in double (24 + 24 significant bits < 53), so
// only the additions round. Four independent accumulators hide the add
// latency; they are combined in a fixed order. The conversions leave the
// loop a little slower than a float dot product, so it would fall behind the
// hardware prefetcher on arrays from memory; it prefetches 4 KiB ahead
// (harmless past the end: prefetches do not fault).
constexpr int64_t kSquaresPrefetchFloats = 1024;
double SumOfSquaresF64Scalar(int64_t count, const float* x) {
  double sums[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    for (int lane = 0; lane < 4; ++lane) {
      const double value = x[i + lane];
      sums[lane] += value * value;
    }
  }
  for (; i < count; ++i) sums[0] += double{x[i]} * x[i];
  return (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

__attribute__((target("avx512f"))) double SumOfSquaresF64Avx512(
    int64_t count, const float* x) {
  __m512d sum0 = _mm512_setzero_pd(), sum1 = _mm512_setzero_pd();
  __m512d sum2 = _mm512_setzero_pd(), sum3 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const char* ahead =
        reinterpret_cast<const char*>(x + i + kSquaresPrefetchFloats);
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    const __m512d d0 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const __m512d d1 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    const __m512d d2 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 16));
    const __m512d d3 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 24));
    sum0 = _mm512_fmadd_pd(d0, d0, sum0);
    sum1 = _mm512_fmadd_pd(d1, d1, sum1);
    sum2 = _mm512_fmadd_pd(d2, d2, sum2);
    sum3 = _mm512_fmadd_pd(d3, d3, sum3);
  }
  for (; i + 8 <= count; i += 8) {
    const __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    sum0 = _mm512_fmadd_pd(d, d, sum0);
  }
  // The tail inline: a call into SSE code here, with the upper halves of the
  // vector registers dirty, would cost more than the loop above.
  double tail = 0.0;
  for (; i < count; ++i) tail += double{x[i]} * x[i];
  const __m512d sum =
      _mm512_add_pd(_mm512_add_pd(sum0, sum1), _mm512_add_pd(sum2, sum3));
  return _mm512_reduce_add_pd(sum) + tail;
}

__attribute__((target("avx2,fma"))) double SumOfSquaresF64Avx2(int64_t count,
                                                               const float* x) {
  __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
  __m256d sum2 = _mm256_setzero_pd(), sum3 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kSquaresPrefetchFloats),
                 _MM_HINT_T0);
    const __m256d d0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d d1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    const __m256d d2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8));
    const __m256d d3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
    sum0 = _mm256_fmadd_pd(d0, d0, sum0);
    sum1 = _mm256_fmadd_pd(d1, d1, sum1);
    sum2 = _mm256_fmadd_pd(d2, d2, sum2);
    sum3 = _mm256_fmadd_pd(d3, d3, sum3);
  }
  for (; i + 4 <= count; i += 4) {
    const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    sum0 = _mm256_fmadd_pd(d, d, sum0);
  }
  double tail = 0.0;
  for (; i < count; ++i) tail += double{x[i]} * x[i];
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(_mm256_add_pd(sum0, sum1),
                                       _mm256_add_pd(sum2, sum3)));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail;
}

}  // namespace

float ScalarExp(float x) {
  x = x < kExpLow ? kExpLow : (x > kExpHigh ? kExpHigh : x);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2High, x);
  r = std::fma(-n, kLn2Low, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  p = std::fma(p * r, r, r) + 1.0f;
  return std::ldexp(p, static_cast<int>(n));
}

float VectorMax(int64_t count, const float* x) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return MaxAvx512(count, x);
    case SimdLevel::kAvx2:
      return MaxAvx2(count, x);
    case SimdLevel::kScalar:
      break;
  }
  return MaxScalar(count, x);
}

float ExpAndSum(int64_t count, const float* x, float scale, float shift,
                float* out) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return ExpAndSumAvx512(count, x, scale, shift, out);
    case SimdLevel::kAvx2:
      return ExpAndSumAvx2(count, x, scale, shift, out);
    case SimdLevel::kScalar:
      break;
  }
  return ExpAndSumScalar(count, x, scale, shift, out);
}

double SumOfSquaresF64(int64_t count, const float* x) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return SumOfSquaresF64Avx512(count, x);
    case SimdLevel::kAvx2:
      return SumOfSquaresF64Avx2(count, x);
    case SimdLevel::kScalar:
      break;
  }
  return SumOfSquaresF64Scalar(count, x);
}

void SiluMultiply(int64_t count, const float* gate, const float* up,
                  float* out) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return SiluMultiplyAvx512(count, gate, up, out);
    case SimdLevel::kAvx2:
      return SiluMultiplyAvx2(count, gate, up, out);
    case SimdLevel::kScalar:
      break;
  }
  SiluMultiplyScalar(count, gate, up, out);
}

void SiluMultiplyBackward(int64_t count, const float* gate, const float* up,
                          const float* dout, float* dgate, float* dup) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return SiluMultiplyBackwardAvx512(count, gate, up, dout, dgate, dup);
    case SimdLevel::kAvx2:
      return SiluMultiplyBackwardAvx2(count, gate, up, dout, dgate, dup);
    case SimdLevel::kScalar:
      break;
  }
  SiluMultiplyBackwardScalar(count, gate, up, dout, dgate, dup);
}

}  // namespace plateau::kernels::cpu
