// Fused single-pass AdamW on float32 arrays (the update of kernels/adamw.h):
// each element's parameter, gradient and two moments are read once and the
// parameter and moments written once, 28 bytes of traffic per parameter.
// Single-threaded: callers split [0, count) across their threads.
#ifndef PLATEAU_KERNELS_CPU_ADAMW_H_
#define PLATEAU_KERNELS_CPU_ADAMW_H_

#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {

// Uses DetectedSimdLevel().
void AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                 float* params, const float* grads, float* first_moment,
                 float* second_moment);

// REQUIRES: SimdLevelSupported(level). For tests and benchmarks.
void AdamWUpdateAt(SimdLevel level, const AdamWCoefficients& coefficients,
                   int64_t count, float* params, const float* grads,
                   float* first_moment, float* second_moment);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_ADAMW_H_
