// OpenBLAS, loaded with dlopen on first use rather than linked, so that its
// kernel choice can be made first. OpenBLAS 0.3.21 (Debian 12) does not know
// CPUs newer than its release and falls back to its slowest x86-64 kernels
// ("Prescott", SSE3) on them, 3-4x slower than their AVX-512 ones. Before
// loading, an unset OPENBLAS_CORETYPE is set from the CPU's features
// (AVX-512 -> SkylakeX, AVX2 + FMA -> Haswell); a user's setting is kept.
#ifndef PLATEAU_KERNELS_CPU_BLAS_H_
#define PLATEAU_KERNELS_CPU_BLAS_H_

#include <cblas.h>

namespace plateau::kernels::cpu {

struct OpenBlas {
  decltype(&cblas_sgemm) sgemm;
  decltype(&cblas_sdot) sdot;
  decltype(&openblas_set_num_threads) set_num_threads;
  decltype(&openblas_get_corename) corename;
};

// Loads libopenblas.so.0 once (thread-safe). The library is a dependency
// installed with the project: if it cannot be loaded, prints why and exits.
const OpenBlas& Blas();

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_BLAS_H_
