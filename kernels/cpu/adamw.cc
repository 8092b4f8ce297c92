#include "kernels/cpu/adamw.h"

#include <cmath>

#include "kernels/cpu/intrinsics.h"

namespace plateau::kernels::cpu {
namespace {

// The vector loops' arithmetic one element at a time: the same operations in
// the same order, with std::fma where they fuse, so every SIMD level (and
// every vector tail) rounds identically and gives bitwise the same result.
// No bare a * b + c is left for the compiler to contract.
void AdamWScalar(const AdamWCoefficients& c, int64_t begin, int64_t end,
                 float* params, const float* grads, float* m, float* v) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = grads[i];
    const float m_new = std::fma(c.beta1, m[i], c.one_minus_beta1 * g);
    const float v_new = std::fma(c.beta2, v[i], c.one_minus_beta2 * (g * g));
    const float denominator =
        std::fma(std::sqrt(v_new), c.inverse_sqrt_correction2, c.epsilon);
    const float update = (c.step_size * m_new) / denominator;
    params[i] = std::fma(params[i], c.decay, -update);
    m[i] = m_new;
    v[i] = v_new;
  }
}

__attribute__((target("avx2,fma"))) void AdamWAvx2(const AdamWCoefficients& c,
                                                   int64_t count, float* params,
                                                   const float* grads, float* m,
                                                   float* v) {
  const __m256 beta1 = _mm256_set1_ps(c.beta1);
  const __m256 one_minus_beta1 = _mm256_set1_ps(c.one_minus_beta1);
  const __m256 beta2 = _mm256_set1_ps(c.beta2);
  const __m256 one_minus_beta2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 inverse_sqrt_correction2 =
      _mm256_set1_ps(c.inverse_sqrt_correction2);
  const __m256 epsilon = _mm256_set1_ps(c.epsilon);
  const __m256 decay = _mm256_set1_ps(c.decay);
  const __m256 step_size = _mm256_set1_ps(c.step_size);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 g = _mm256_loadu_ps(grads + i);
    const __m256 m_new = _mm256_fmadd_ps(beta1, _mm256_loadu_ps(m + i),
                                         _mm256_mul_ps(one_minus_beta1, g));
    const __m256 v_new =
        _mm256_fmadd_ps(beta2, _mm256_loadu_ps(v + i),
                        _mm256_mul_ps(one_minus_beta2, _mm256_mul_ps(g, g)));
    const __m256 denominator = _mm256_fmadd_ps(
        _mm256_sqrt_ps(v_new), inverse_sqrt_correction2, epsilon);
    const __m256 update =
        _mm256_div_ps(_mm256_mul_ps(step_size, m_new), denominator);
    const __m256 p =
        _mm256_fmsub_ps(_mm256_loadu_ps(params + i), decay, update);
    _mm256_storeu_ps(params + i, p);
    _mm256_storeu_ps(m + i, m_new);
    _mm256_storeu_ps(v + i, v_new);
  }
  AdamWScalar(c, i, count, params, grads, m, v);
}

__attribute__((target("avx512f"))) void AdamWAvx512(const AdamWCoefficients& c,
                                                    int64_t count,
                                                    float* params,
                                                    const float* grads,
                                                    float* m, float* v) {
  const __m512 beta1 = _mm512_set1_ps(c.beta1);
  const __m512 one_minus_beta1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 beta2 = _mm512_set1_ps(c.beta2);
  const __m512 one_minus_beta2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 inverse_sqrt_correction2 =
      _mm512_set1_ps(c.inverse_sqrt_correction2);
  const __m512 epsilon = _mm512_set1_ps(c.epsilon);
  const __m512 decay = _mm512_set1_ps(c.decay);
  const __m512 step_size = _mm512_set1_ps(c.step_size);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 g = _mm512_loadu_ps(grads + i);
    const __m512 m_new = _mm512_fmadd_ps(beta1, _mm512_loadu_ps(m + i),
                                         _mm512_mul_ps(one_minus_beta1, g));
    const __m512 v_new =
        _mm512_fmadd_ps(beta2, _mm512_loadu_ps(v + i),
                        _mm512_mul_ps(one_minus_beta2, _mm512_mul_ps(g, g)));
    const __m512 denominator = _mm512_fmadd_ps(
        _mm512_sqrt_ps(v_new), inverse_sqrt_correction2, epsilon);
    const __m512 update =
        _mm512_div_ps(_mm512_mul_ps(step_size, m_new), denominator);
    const __m512 p =
        _mm512_fmsub_ps(_mm512_loadu_ps(params + i), decay, update);
    _mm512_storeu_ps(params + i, p);
    _mm512_storeu_ps(m + i, m_new);
    _mm512_storeu_ps(v + i, v_new);
  }
  AdamWScalar(c, i, count, params, grads, m, v);
}

}  // namespace

void AdamWUpdateAt(SimdLevel level, const AdamWCoefficients& coefficients,
                   int64_t count, float* params, const float* grads,
                   float* first_moment, float* second_moment) {
  switch (level) {
    case SimdLevel::kAvx512:
      AdamWAvx512(coefficients, count, params, grads, first_moment,
                  second_moment);
      return;
    case SimdLevel::kAvx2:
      AdamWAvx2(coefficients, count, params, grads, first_moment,
                second_moment);
      return;
    case SimdLevel::kScalar:
      AdamWScalar(coefficients, 0, count, params, grads, first_moment,
                  second_moment);
      return;
  }
}

void AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                 float* params, const float* grads, float* first_moment,
                 float* second_moment) {
  AdamWUpdateAt(DetectedSimdLevel(), coefficients, count, params, grads,
                first_moment, second_moment);
}

}  // namespace plateau::kernels::cpu
