// Vector primitives for the softmax-like loops of the CPU kernels, with the
// SIMD level chosen at run time (simd.h). exp is the Cephes single-precision
// polynomial: relative error under 2e-7 for inputs in [-87, 88]; inputs
// below -87 give exp(-87) (about 1.6e-38), which sums treat as zero.
#ifndef PLATEAU_KERNELS_CPU_VECTOR_MATH_H_
#define PLATEAU_KERNELS_CPU_VECTOR_MATH_H_

#include <cstdint>

namespace plateau::kernels::cpu {

// Largest of x[0..count); -infinity when count == 0.
float VectorMax(int64_t count, const float* x);

// out[i] = exp(scale * x[i] - shift); returns the sum of out. out may alias x.
float ExpAndSum(int64_t count, const float* x, float scale, float shift,
                float* out);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void SiluMultiply(int64_t count, const float* gate, const float* up,
                  float* out);

// dgate[i] = dout[i] * up[i] * silu'(gate[i]); dup[i] = dout[i] *
// silu(gate[i]).
void SiluMultiplyBackward(int64_t count, const float* gate, const float* up,
                          const float* dout, float* dgate, float* dup);

// Sum of x[i]^2, squared and accumulated in float64 (no float overflow for
// any finite x). Deterministic: a fixed order for a given SIMD level.
double SumOfSquaresF64(int64_t count, const float* x);

// exp with the same polynomial, one value at a time.
float ScalarExp(float x);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_VECTOR_MATH_H_
