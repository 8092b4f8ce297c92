// <immintrin.h> for the hand-vectorised kernels. GCC 12's AVX-512 headers
// initialise "undefined" vectors from themselves (GCC bug 105593), which
// -Wuninitialized reports at every use under -Werror; the warning is silenced
// for the header only.
#ifndef PLATEAU_KERNELS_CPU_INTRINSICS_H_
#define PLATEAU_KERNELS_CPU_INTRINSICS_H_

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#endif  // PLATEAU_KERNELS_CPU_INTRINSICS_H_
