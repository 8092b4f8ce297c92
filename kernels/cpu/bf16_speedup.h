// How much faster this CPU makes bf16 matrix products than float32 ones,
// measured: what `precision: auto` chooses by (docs/ARCHITECTURE.md
// section 7). bf16 products run 3-4x float32's where oneDNN has AVX-512 BF16
// or AMX kernels, and about as fast where it has none (the fixed-order
// kernel, fixed_order_gemm.h), so the answer is a property of the CPU type
// that its model name alone does not give.
#ifndef PLATEAU_KERNELS_CPU_BF16_SPEEDUP_H_
#define PLATEAU_KERNELS_CPU_BF16_SPEEDUP_H_

namespace plateau::kernels::cpu {

// float32's time over bf16's for the products of a training step of the
// example model (the forward, input-gradient and weight-gradient products
// of an attention projection and of an expert, bf16 operands stored in
// bf16), each precision the best of several turns taken alternately, on
// `threads` threads: about a third of a second. > 1 where bf16 is faster.
// REQUIRES: threads >= 1.
double MeasureBf16ProductSpeedup(int threads);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_BF16_SPEEDUP_H_
