// How much faster this CPU makes bf16 matrix products than float32 ones,
// measured: what `precision: auto` chooses by (docs/ARCHITECTURE.md
// section 7). bf16 products run 3-4x float32's where oneDNN has AVX-512 BF16
// or AMX kernels, and about as fast where it has none (the fixed-order
// kernel, fixed_order_gemm.h), so the answer is a property of the CPU type
// that its model name alone does not give.
//
// The same machine must give the same answer while other work shares its
// cores (a rank's neighbours, the tests beside it), or one spec would train
// in bf16 on one run and fp32 on the next. So the products run on the
// calling thread and are timed in its own CPU time, which the neighbours do
// not add to, and the answer is the median of paired turns, fp32 then bf16,
// which a burst of contention moves by one pair at most.
#ifndef PLATEAU_KERNELS_CPU_BF16_SPEEDUP_H_
#define PLATEAU_KERNELS_CPU_BF16_SPEEDUP_H_

namespace plateau::kernels::cpu {

// float32's time over bf16's for the products of a training step of the
// example model (the forward, input-gradient and weight-gradient products
// of an attention projection and of an expert, bf16 operands stored in
// bf16) on one thread: about half a second. > 1 where bf16 is faster.
double MeasureBf16ProductSpeedup();

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_BF16_SPEEDUP_H_
