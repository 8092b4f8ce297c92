// OpenBLAS, loaded with dlopen on first use rather than linked, so that its
// kernel choice can be made first. OpenBLAS 0.3.21 (Debian 12) does not know
// CPUs newer than its release and falls back to its slowest x86-64 kernels
// ("Prescott", SSE3) on them, 3-4x slower than their AVX-512 ones. Before
// loading, an unset OPENBLAS_CORETYPE is set from the SIMD level the other
// kernels run at (simd.h: the CPU's, or lower with PLATEAU_SIMD): AVX-512
// -> SkylakeX, AVX2 + FMA -> Haswell, held below AVX2 -> Nehalem; a user's
// setting is kept.
//
// Failure: OpenBLAS is a dependency installed with the project, and the CPU
// backend cannot compute without it. BlasStatus() says whether it loaded,
// and why not, for callers that report errors as a Status. Blas() when it
// did not load ends the process through BlasFatalError, the one place the
// CPU kernels fail without returning.
#ifndef PLATEAU_KERNELS_CPU_BLAS_H_
#define PLATEAU_KERNELS_CPU_BLAS_H_

#include <cblas.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace plateau::kernels::cpu {

struct OpenBlas {
  decltype(&cblas_sgemm) sgemm;
  decltype(&cblas_sdot) sdot;
  decltype(&openblas_set_num_threads) set_num_threads;
  decltype(&openblas_get_corename) corename;  // for benchmark reports
};

// Loads OpenBLAS from the shared library `library` (dlopen name) and resolves
// every entry point of OpenBlas. FAILED_PRECONDITION, saying why and how to
// install it, when the library or an entry point is missing. Each call
// dlopens again: use BlasStatus() and Blas(); this is for tests.
absl::StatusOr<OpenBlas> LoadOpenBlas(const char* library);

// Whether libopenblas.so.0 loaded. The first call of this or Blas() loads it
// (thread-safe); later calls return the same status.
const absl::Status& BlasStatus();

// The loaded library. When BlasStatus() is not OK, calls
// BlasFatalError(BlasStatus().message()) instead of returning.
const OpenBlas& Blas();

// Prints "plateau: <message>" to stderr and aborts. For failures the CPU
// kernels cannot return (ops return void), such as OpenBLAS missing.
[[noreturn]] void BlasFatalError(absl::string_view message);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_BLAS_H_
