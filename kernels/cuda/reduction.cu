// Reductions to float64 in a fixed order, so that results are the same on
// every run: a first pass of one partial per block (its grid a function of
// the size only), then one block that adds the partials.
#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

constexpr int kFinishThreads = 1024;

template <bool kSquares>
__global__ void SumPartialsKernel(int64_t count, const float* x,
                                  double* partials) {
  double sum = 0.0;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const double value = x[i];
    sum += kSquares ? value * value : value;
  }
  sum = BlockSum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kFinishThreads)
    FinishSumKernel(int64_t partial_count, const double* partials,
                    double* out) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < partial_count; i += blockDim.x) {
    sum += partials[i];
  }
  sum = BlockSum(sum);
  if (threadIdx.x == 0) *out = sum;
}

// Thread per column of one part of the rows: partials[part, column].
__global__ void ColumnSumPartialsKernel(int64_t rows, int64_t columns,
                                        int64_t rows_per_part, const float* x,
                                        double* partials) {
  const int64_t column =
      static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= columns) return;
  const int64_t part = blockIdx.y;
  const int64_t begin = part * rows_per_part;
  const int64_t end =
      begin + rows_per_part < rows ? begin + rows_per_part : rows;
  double sum = 0.0;
  for (int64_t r = begin; r < end; ++r) sum += x[r * columns + column];
  partials[part * columns + column] = sum;
}

__global__ void ColumnSumFinishKernel(int64_t parts, int64_t columns,
                                      const double* partials, double* sums) {
  for (int64_t column = GlobalThread(); column < columns;
       column += GridThreads()) {
    double sum = 0.0;
    for (int64_t part = 0; part < parts; ++part) {
      sum += partials[part * columns + column];
    }
    sums[column] = sum;
  }
}

}  // namespace

cudaError_t LaunchSum(int64_t count, const float* x, bool squares,
                      double* partials, double* out, cudaStream_t stream) {
  ForgetStaleError();
  const int64_t blocks = ReductionBlocks(count);
  const dim3 grid(static_cast<unsigned int>(blocks));
  if (squares) {
    PLATEAU_LAUNCH(SumPartialsKernel<true>, grid, kBlockThreads, stream)
    (count, x, partials);
  } else {
    PLATEAU_LAUNCH(SumPartialsKernel<false>, grid, kBlockThreads, stream)
    (count, x, partials);
  }
  PLATEAU_LAUNCH(FinishSumKernel, 1, kFinishThreads, stream)
  (blocks, partials, out);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSums(int64_t rows, int64_t columns, const float* x,
                             double* partials, double* sums,
                             cudaStream_t stream) {
  ForgetStaleError();
  if (columns == 0) return cudaSuccess;
  const RowParts parts = RowPartsOf(rows);
  const dim3 grid(
      static_cast<unsigned int>((columns + kBlockThreads - 1) / kBlockThreads),
      static_cast<unsigned int>(parts.parts));
  PLATEAU_LAUNCH(ColumnSumPartialsKernel, grid, kBlockThreads, stream)
  (rows, columns, parts.rows_per_part, x, partials);
  PLATEAU_LAUNCH(ColumnSumFinishKernel,
                 static_cast<unsigned int>(GridStrideBlocks(columns)),
                 kBlockThreads, stream)
  (parts.parts, columns, partials, sums);
  return cudaGetLastError();
}

}  // namespace plateau::kernels::cuda
