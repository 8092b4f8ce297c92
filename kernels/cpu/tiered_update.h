// The tiered optimizers' kernels (kernels/tiered_update.h) on float32 arrays,
// vectorised for the widest SIMD level of the CPU (DetectedSimdLevel). Each
// is single-threaded: CpuOps splits them across its threads.
#ifndef PLATEAU_KERNELS_CPU_TIERED_UPDATE_H_
#define PLATEAU_KERNELS_CPU_TIERED_UPDATE_H_

#include <cstdint>

#include "kernels/tiered_update.h"

namespace plateau::kernels::cpu {

// Adds the slice's g^2 + kFactoredSquareFloor to its row_sums[row] and
// column_sums[column].
void AccumulateSquares(const TieredSlice& slice);

// Updates the slice's momentum and exact second moment; returns the sum of
// u^2 over the slice.
double TieredMeasure(const TieredCoefficients& coefficients,
                     const TieredSlice& slice);

// p <- p * decay - learning_rate * update_scale * u, u from the state that
// TieredMeasure left.
void TieredApply(const TieredCoefficients& coefficients,
                 const TieredSlice& slice);

// The whole update of a slice that is a whole tensor: for a factored matrix
// its row and column sums and statistics first (see TieredSlice), then
// Measure, the rms clip to clip_threshold, and Apply.
void TieredUpdate(const TieredCoefficients& coefficients,
                  const TieredSlice& slice, float clip_threshold);

// Lion on the slice's parameters and (float32) momentum.
void LionUpdate(const TieredCoefficients& coefficients,
                const TieredSlice& slice);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_TIERED_UPDATE_H_
