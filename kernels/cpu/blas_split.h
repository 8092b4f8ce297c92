// OpenBLAS calls for the int64 sizes of kernels/ops.h. OpenBLAS takes every
// size and leading dimension as a 32-bit blasint; a call that would narrow
// one is cut into calls that fit instead, so no size is ever truncated.
#ifndef PLATEAU_KERNELS_CPU_BLAS_SPLIT_H_
#define PLATEAU_KERNELS_CPU_BLAS_SPLIT_H_

#include <cblas.h>

#include <cstdint>
#include <functional>
#include <limits>

#include "kernels/ops.h"

namespace plateau::kernels::cpu {

// The largest size or leading dimension one OpenBLAS call takes.
inline constexpr int64_t kBlasIntMax = std::numeric_limits<blasint>::max();

// c = alpha op(a) op(b) + beta c (GemmArgs) as single-threaded sgemm calls:
// one call when every size fits, else the pieces of SplitGemmForBlas.
void BlasGemm(const GemmArgs& args);

// sum x[i] * y[i] in float, as sdot over consecutive chunks that fit.
float BlasDot(int64_t count, const float* x, const float* y);

// Cuts a product into pieces whose m, n, k and leading dimensions are all at
// most `limit` (BlasGemm's is kBlasIntMax; tests pass small ones) and hands
// them to `piece` in a fixed order. m and n are cut into blocks of c; k into
// consecutive chunks accumulated in order, the first with args.beta and the
// rest with beta = 1, so a product is always cut, and rounded, the same way.
// A leading dimension above `limit` only matters for a matrix with more than
// one stored row: the dimension along its rows is then cut into single rows
// (slow, but exact), and each piece's copy gets a leading dimension that fits.
// Nothing is called when m or n is 0.
void SplitGemmForBlas(const GemmArgs& args, int64_t limit,
                      const std::function<void(const GemmArgs&)>& piece);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_BLAS_SPLIT_H_
