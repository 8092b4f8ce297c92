// Run-time choice of the widest vector instructions this CPU supports, so one
// binary is fast on AVX-512 machines and still runs on plain x86-64.
#ifndef PLATEAU_KERNELS_CPU_SIMD_H_
#define PLATEAU_KERNELS_CPU_SIMD_H_

namespace plateau::kernels::cpu {

enum class SimdLevel { kScalar, kAvx2, kAvx512 };

// The best level of this CPU (AVX2 requires FMA too). Cached after the first
// call; PLATEAU_SIMD=scalar|avx2|avx512 lowers it (never raises it).
SimdLevel DetectedSimdLevel();

bool SimdLevelSupported(SimdLevel level);

const char* SimdLevelName(SimdLevel level);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_SIMD_H_
