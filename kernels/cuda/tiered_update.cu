// The tiered optimizers' passes (kernels/tiered_update.h) over groups of
// slices in one launch each: Measure, Apply and Lion take a block per piece
// of a slice (launch_geometry.h's TieredPieces); AccumulateSquares a warp per
// row and a thread per column a slice touches, each sum with one writer;
// TieredUpdate a block per whole (small) tensor, all its passes in one go.
// The per-element formulas are kernels/cpu/tiered_update.cc's.
#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = kBlockThreads / 32;

// m / (1 - beta1^t) (or g) for element i, updating the momentum first when
// `update`.
__device__ __forceinline__ float Numerator(const TieredCoefficients& c,
                                           const TieredSlice& s, int64_t i,
                                           bool update) {
  const float g = s.grads[i];
  if (s.momentum != nullptr) {
    float m = s.momentum[i];
    if (update) {
      m = c.beta1 * m + c.one_minus_beta1 * g;
      s.momentum[i] = m;
    }
    return m * c.momentum_correction;
  }
  if (s.momentum_bfloat16 != nullptr) {
    uint16_t m = s.momentum_bfloat16[i];
    if (update) {
      m = DeviceFloatToBfloat16(c.beta1 * DeviceBfloat16ToFloat(m) +
                                c.one_minus_beta1 * g);
      s.momentum_bfloat16[i] = m;
    }
    return DeviceBfloat16ToFloat(m) * c.momentum_correction;
  }
  return g;
}

// sqrt(v) + eps for element i, updating an exact moment first when `update`.
__device__ __forceinline__ float Denominator(const TieredCoefficients& c,
                                             const TieredSlice& s, int64_t i,
                                             bool update) {
  if (s.second_moment != nullptr) {
    const float g = s.grads[i];
    float v = s.second_moment[i];
    if (update) {
      v = c.beta2 * v + c.one_minus_beta2 * (g * g);
      s.second_moment[i] = v;
    }
    return sqrtf(v * s.second_moment_scale) + c.epsilon;
  }
  const int64_t element = s.first_element + i;
  return s.row_roots[element / s.columns] *
             s.column_roots[element % s.columns] +
         c.epsilon;
}

__device__ __forceinline__ void Apply(const TieredCoefficients& c,
                                      const TieredSlice& s, int64_t i) {
  const float decay = s.decay ? c.decay : 1.0f;
  const float step = c.learning_rate * s.update_scale;
  const float u = Numerator(c, s, i, false) / Denominator(c, s, i, false);
  s.params[i] = s.params[i] * decay - step * u;
}

__global__ void TieredMeasureKernel(TieredCoefficients c,
                                    const TieredSlice* slices,
                                    const SlicePiece* pieces,
                                    double* piece_sums) {
  const SlicePiece piece = pieces[blockIdx.x];
  const TieredSlice s = slices[piece.slice];
  double sum = 0.0;
  for (int64_t i = piece.begin + threadIdx.x; i < piece.end; i += blockDim.x) {
    const float u = Numerator(c, s, i, true) / Denominator(c, s, i, true);
    sum += u * u;
  }
  sum = BlockSum(sum);
  if (threadIdx.x == 0) piece_sums[blockIdx.x] = sum;
}

__global__ void TieredApplyKernel(TieredCoefficients c,
                                  const TieredSlice* slices,
                                  const SlicePiece* pieces) {
  const SlicePiece piece = pieces[blockIdx.x];
  const TieredSlice s = slices[piece.slice];
  for (int64_t i = piece.begin + threadIdx.x; i < piece.end; i += blockDim.x) {
    Apply(c, s, i);
  }
}

__global__ void LionKernel(TieredCoefficients c, const TieredSlice* slices,
                           const SlicePiece* pieces) {
  const SlicePiece piece = pieces[blockIdx.x];
  const TieredSlice s = slices[piece.slice];
  const float decay = s.decay ? c.decay : 1.0f;
  for (int64_t i = piece.begin + threadIdx.x; i < piece.end; i += blockDim.x) {
    const float g = s.grads[i];
    const float m = s.momentum[i];
    const float mixed = c.beta1 * m + c.one_minus_beta1 * g;
    const float sign =
        static_cast<float>(mixed > 0.0f) - static_cast<float>(mixed < 0.0f);
    s.params[i] = s.params[i] * decay - c.learning_rate * sign;
    s.momentum[i] = c.beta2 * m + c.one_minus_beta2 * g;
  }
}

// The slice whose tasks include `task` (starts: slice_count + 1 entries).
__device__ int64_t SliceOfTask(const int64_t* starts, int64_t slice_count,
                               int64_t task) {
  int64_t low = 0;
  int64_t high = slice_count - 1;
  while (low < high) {
    const int64_t middle = low + (high - low + 1) / 2;
    if (starts[middle] <= task) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

__device__ __forceinline__ float SquareOf(float g) {
  return g * g + kFactoredSquareFloor;
}

// A warp per row task: the row's squares over the slice's columns of it,
// added to row_sums[row].
__global__ void RowSquaresKernel(const TieredSlice* slices, int64_t slice_count,
                                 const int64_t* starts, int64_t tasks) {
  const int64_t task =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (task >= tasks) return;  // whole warps
  const int lane = threadIdx.x % 32;
  const int64_t slice_index = SliceOfTask(starts, slice_count, task);
  const TieredSlice& s = slices[slice_index];
  const int64_t first_row = s.first_element / s.columns;
  const int64_t row = first_row + (task - starts[slice_index]);
  const int64_t row_start = row * s.columns;
  const int64_t begin =
      row_start > s.first_element ? row_start : s.first_element;
  const int64_t slice_end = s.first_element + s.count;
  const int64_t row_end = row_start + s.columns;
  const int64_t end = row_end < slice_end ? row_end : slice_end;
  float sum = 0.0f;
  for (int64_t element = begin + lane; element < end; element += 32) {
    sum += SquareOf(s.grads[element - s.first_element]);
  }
  sum = WarpSum(sum);
  if (lane == 0) s.row_sums[row] += sum;
}

// A thread per column task: the column's squares down the slice's rows, in
// row order, added to column_sums[column].
__global__ void ColumnSquaresKernel(const TieredSlice* slices,
                                    int64_t slice_count, const int64_t* starts,
                                    int64_t tasks) {
  for (int64_t task = GlobalThread(); task < tasks; task += GridThreads()) {
    const int64_t slice_index = SliceOfTask(starts, slice_count, task);
    const TieredSlice& s = slices[slice_index];
    const int64_t first_row = s.first_element / s.columns;
    const int64_t last_row = (s.first_element + s.count - 1) / s.columns;
    const int64_t offset = task - starts[slice_index];
    // Within one row the tasks are the slice's own columns.
    const int64_t column =
        first_row == last_row ? s.first_element % s.columns + offset : offset;
    const int64_t slice_end = s.first_element + s.count;
    float sum = s.column_sums[column];
    bool touched = false;
    for (int64_t row = first_row; row <= last_row; ++row) {
      const int64_t element = row * s.columns + column;
      if (element < s.first_element || element >= slice_end) continue;
      sum += SquareOf(s.grads[element - s.first_element]);
      touched = true;
    }
    if (touched) s.column_sums[column] = sum;
  }
}

// A block per slice, a whole tensor: for a factored matrix its row and
// column sums and statistics first, then Measure, the rms clip and Apply.
__global__ void TieredUpdateKernel(TieredCoefficients c,
                                   const TieredSlice* slices,
                                   float clip_threshold) {
  TieredSlice s = slices[blockIdx.x];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  if (s.row_statistics != nullptr) {
    for (int64_t r = warp; r < s.rows; r += warps) {
      float sum = 0.0f;
      for (int64_t column = lane; column < s.columns; column += 32) {
        sum += SquareOf(s.grads[r * s.columns + column]);
      }
      sum = WarpSum(sum);
      if (lane == 0) {
        s.row_sums[r] = c.beta2 * s.row_statistics[r] + c.one_minus_beta2 * sum;
      }
    }
    for (int64_t column = threadIdx.x; column < s.columns;
         column += blockDim.x) {
      float sum = 0.0f;
      for (int64_t r = 0; r < s.rows; ++r) {
        sum += SquareOf(s.grads[r * s.columns + column]);
      }
      s.column_sums[column] =
          c.beta2 * s.column_statistics[column] + c.one_minus_beta2 * sum;
    }
    __syncthreads();
    double row_total = 0.0;
    for (int64_t r = threadIdx.x; r < s.rows; r += blockDim.x) {
      row_total += s.row_sums[r];
    }
    row_total = BlockSum(row_total);
    const float row_scale =
        static_cast<float>(s.second_moment_scale / row_total);
    for (int64_t r = threadIdx.x; r < s.rows; r += blockDim.x) {
      s.row_statistics[r] = sqrtf(s.row_sums[r] * row_scale);
    }
    for (int64_t column = threadIdx.x; column < s.columns;
         column += blockDim.x) {
      s.column_statistics[column] = sqrtf(s.column_sums[column]);
    }
    __syncthreads();
    s.row_roots = s.row_statistics;
    s.column_roots = s.column_statistics;
  }
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < s.count; i += blockDim.x) {
    const float u = Numerator(c, s, i, true) / Denominator(c, s, i, true);
    sum += u * u;
  }
  sum = BlockSum(sum);
  const double rms = sqrt(sum / static_cast<double>(s.count));
  const double ratio = rms / clip_threshold;
  s.update_scale = static_cast<float>(1.0 / (ratio > 1.0 ? ratio : 1.0));
  // Each thread applies the elements it measured.
  for (int64_t i = threadIdx.x; i < s.count; i += blockDim.x) Apply(c, s, i);
}

}  // namespace

cudaError_t LaunchTieredMeasure(const TieredCoefficients& coefficients,
                                const TieredSlice* slices,
                                const SlicePiece* pieces, int64_t piece_count,
                                double* piece_sums, cudaStream_t stream) {
  ForgetStaleError();
  if (piece_count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(TieredMeasureKernel, static_cast<unsigned int>(piece_count),
                 kBlockThreads, stream)
  (coefficients, slices, pieces, piece_sums);
  return cudaGetLastError();
}

cudaError_t LaunchTieredApply(const TieredCoefficients& coefficients,
                              const TieredSlice* slices,
                              const SlicePiece* pieces, int64_t piece_count,
                              cudaStream_t stream) {
  ForgetStaleError();
  if (piece_count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(TieredApplyKernel, static_cast<unsigned int>(piece_count),
                 kBlockThreads, stream)
  (coefficients, slices, pieces);
  return cudaGetLastError();
}

cudaError_t LaunchLionUpdate(const TieredCoefficients& coefficients,
                             const TieredSlice* slices,
                             const SlicePiece* pieces, int64_t piece_count,
                             cudaStream_t stream) {
  ForgetStaleError();
  if (piece_count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(LionKernel, static_cast<unsigned int>(piece_count),
                 kBlockThreads, stream)
  (coefficients, slices, pieces);
  return cudaGetLastError();
}

cudaError_t LaunchAccumulateSquares(const TieredSlice* slices,
                                    int64_t slice_count,
                                    const int64_t* row_task_starts,
                                    const int64_t* column_task_starts,
                                    int64_t row_tasks, int64_t column_tasks,
                                    cudaStream_t stream) {
  ForgetStaleError();
  if (row_tasks > 0) {
    PLATEAU_LAUNCH(RowSquaresKernel,
                   static_cast<unsigned int>((row_tasks + kWarpsPerBlock - 1) /
                                             kWarpsPerBlock),
                   kBlockThreads, stream)
    (slices, slice_count, row_task_starts, row_tasks);
  }
  if (column_tasks > 0) {
    PLATEAU_LAUNCH(ColumnSquaresKernel,
                   static_cast<unsigned int>(GridStrideBlocks(column_tasks)),
                   kBlockThreads, stream)
    (slices, slice_count, column_task_starts, column_tasks);
  }
  return cudaGetLastError();
}

cudaError_t LaunchTieredUpdate(const TieredCoefficients& coefficients,
                               const TieredSlice* slices, int64_t slice_count,
                               float clip_threshold, cudaStream_t stream) {
  ForgetStaleError();
  if (slice_count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(TieredUpdateKernel, static_cast<unsigned int>(slice_count),
                 kBlockThreads, stream)
  (coefficients, slices, clip_threshold);
  return cudaGetLastError();
}

}  // namespace plateau::kernels::cuda
