// RMSNorm (one block per row, block reductions; the weight gradient summed
// over parts of the rows, then the parts in order), its per-head form for
// QK-norm (one block per row and head, likewise) and the rotary embedding
// (one thread per rotated pair), as kernels/cpu/normalization.cc computes
// them.
#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

// A bf16 x (X uint16_t) is widened as it is read.
template <typename X, typename Out>
__global__ void RmsNormForwardKernel(int64_t dim, const X* x,
                                     const float* weight, float epsilon,
                                     Out* out, float* inverse_rms) {
  const int64_t row = blockIdx.x;
  const X* in = x + row * dim;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    sum += ValueOf(in[j]) * ValueOf(in[j]);
  }
  sum = BlockSum(sum);
  const float inverse = 1.0f / sqrtf(sum / static_cast<float>(dim) + epsilon);
  if (threadIdx.x == 0) inverse_rms[row] = inverse;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    StoreAs(ValueOf(in[j]) * inverse * weight[j], &out[row * dim + j]);
  }
}

// dx += r * w * g - r^3 * x * (sum_j g_j w_j x_j) / dim, for one row; a
// bf16 dx (Out uint16_t) is widened and the sum rounded once, a bf16 x (X
// uint16_t) widened.
template <typename X, typename Out>
__global__ void RmsNormInputGradientKernel(int64_t dim, const X* x,
                                           const float* weight,
                                           const float* inverse_rms,
                                           const float* dout, Out* dx) {
  const int64_t row = blockIdx.x;
  const X* in = x + row * dim;
  const float* gradient = dout + row * dim;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    dot += gradient[j] * weight[j] * ValueOf(in[j]);
  }
  dot = BlockSum(dot);
  const float inverse = inverse_rms[row];
  const float correction =
      inverse * inverse * inverse * dot / static_cast<float>(dim);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    Out* to = &dx[row * dim + j];
    StoreAs(ValueOf(*to) + (inverse * weight[j] * gradient[j] -
                            correction * ValueOf(in[j])),
            to);
  }
}

// partials[part, j] = sum over the part's rows of dout * x * inverse_rms.
template <typename X>
__global__ void RmsNormWeightPartialsKernel(int64_t rows, int64_t dim,
                                            int64_t rows_per_part, const X* x,
                                            const float* inverse_rms,
                                            const float* dout,
                                            float* partials) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  const int64_t part = blockIdx.y;
  const int64_t begin = part * rows_per_part;
  const int64_t end =
      begin + rows_per_part < rows ? begin + rows_per_part : rows;
  float sum = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    sum += dout[r * dim + j] * ValueOf(x[r * dim + j]) * inverse_rms[r];
  }
  partials[part * dim + j] = sum;
}

__global__ void RmsNormWeightFinishKernel(int64_t parts, int64_t dim,
                                          const float* partials,
                                          float* dweight) {
  for (int64_t j = GlobalThread(); j < dim; j += GridThreads()) {
    float sum = dweight[j];
    for (int64_t part = 0; part < parts; ++part)
      sum += partials[part * dim + j];
    dweight[j] = sum;
  }
}

// 1 / sqrt(mean(x^2) + epsilon) over `dim` values, for every thread of the
// block (a block reduction).
__device__ float BlockInverseRms(const float* x, int64_t dim, float epsilon) {
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) sum += x[j] * x[j];
  sum = BlockSum(sum);
  return 1.0f / sqrtf(sum / static_cast<float>(dim) + epsilon);
}

// One block per (row, head): the head's values scaled by their inverse RMS
// and the weight, in place.
__global__ void HeadRmsNormForwardKernel(int64_t heads, int64_t head_dim,
                                         int64_t row_stride,
                                         const float* weight, float epsilon,
                                         float* x) {
  float* head =
      x + blockIdx.x / heads * row_stride + blockIdx.x % heads * head_dim;
  const float inverse = BlockInverseRms(head, head_dim, epsilon);
  for (int64_t j = threadIdx.x; j < head_dim; j += blockDim.x) {
    head[j] = head[j] * inverse * weight[j];
  }
}

// inverse_rms[row * heads + head], recomputed from the forward's input.
__global__ void HeadInverseRmsKernel(int64_t heads, int64_t head_dim,
                                     const float* x, int64_t x_stride,
                                     float epsilon, float* inverse_rms) {
  const float inverse = BlockInverseRms(
      x + blockIdx.x / heads * x_stride + blockIdx.x % heads * head_dim,
      head_dim, epsilon);
  if (threadIdx.x == 0) inverse_rms[blockIdx.x] = inverse;
}

// partials[part, j] = sum over the part's rows and every head of
// dout * x * inverse_rms, read before the input gradient overwrites dout.
__global__ void HeadRmsNormWeightPartialsKernel(
    int64_t rows, int64_t heads, int64_t head_dim, int64_t rows_per_part,
    const float* x, int64_t x_stride, const float* inverse_rms,
    const float* dout, int64_t row_stride, float* partials) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= head_dim) return;
  const int64_t part = blockIdx.y;
  const int64_t begin = part * rows_per_part;
  const int64_t end =
      begin + rows_per_part < rows ? begin + rows_per_part : rows;
  float sum = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      sum += dout[r * row_stride + h * head_dim + j] *
             x[r * x_stride + h * head_dim + j] * inverse_rms[r * heads + h];
    }
  }
  partials[part * head_dim + j] = sum;
}

// g <- r * w * g - r^3 * x * (sum_j g_j w_j x_j) / head_dim, one block per
// (row, head), in place.
__global__ void HeadRmsNormInputGradientKernel(int64_t heads, int64_t head_dim,
                                               const float* x, int64_t x_stride,
                                               const float* weight,
                                               const float* inverse_rms,
                                               int64_t row_stride, float* dx) {
  const int64_t row = blockIdx.x / heads;
  const int64_t head = blockIdx.x % heads;
  const float* in = x + row * x_stride + head * head_dim;
  float* gradient = dx + row * row_stride + head * head_dim;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < head_dim; j += blockDim.x) {
    dot += gradient[j] * weight[j] * in[j];
  }
  dot = BlockSum(dot);
  const float inverse = inverse_rms[blockIdx.x];
  const float correction =
      inverse * inverse * inverse * dot / static_cast<float>(head_dim);
  for (int64_t j = threadIdx.x; j < head_dim; j += blockDim.x) {
    gradient[j] = inverse * weight[j] * gradient[j] - correction * in[j];
  }
}

// The angles in double (position * frequency loses digits in float at long
// context), as on the CPU; row r is at position (first_row + r) % seq_len.
__global__ void RotaryKernel(int64_t rows, int64_t first_row, int64_t seq_len,
                             int64_t heads, int64_t head_dim,
                             int64_t row_stride, double theta, float sign,
                             float* x) {
  const int64_t half = head_dim / 2;
  const int64_t pairs = rows * heads * half;
  for (int64_t index = GlobalThread(); index < pairs; index += GridThreads()) {
    const int64_t i = index % half;
    const int64_t head = index / half % heads;
    const int64_t row = index / (half * heads);
    const double frequency = pow(
        theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle =
        static_cast<double>((first_row + row) % seq_len) * frequency;
    const float cosine = static_cast<float>(cos(angle));
    const float sine = sign * static_cast<float>(sin(angle));
    float* first = x + row * row_stride + head * head_dim;
    float* second = first + half;
    const float x1 = first[i];
    const float x2 = second[i];
    first[i] = x1 * cosine - x2 * sine;
    second[i] = x2 * cosine + x1 * sine;
  }
}

template <typename X, typename Out>
cudaError_t LaunchRmsNormForwardAs(int64_t rows, int64_t dim, const X* x,
                                   const float* weight, float epsilon, Out* out,
                                   float* inverse_rms, cudaStream_t stream) {
  ForgetStaleError();
  if (rows == 0) return cudaSuccess;
  PLATEAU_LAUNCH((RmsNormForwardKernel<X, Out>),
                 static_cast<unsigned int>(rows), RowBlockThreads(dim), stream)
  (dim, x, weight, epsilon, out, inverse_rms);
  return cudaGetLastError();
}

template <typename X, typename Out>
cudaError_t LaunchRmsNormBackwardAs(int64_t rows, int64_t dim, const X* x,
                                    const float* weight,
                                    const float* inverse_rms, const float* dout,
                                    Out* dx, float* dweight, float* partials,
                                    cudaStream_t stream) {
  ForgetStaleError();
  if (rows == 0 || dim == 0) return cudaSuccess;
  PLATEAU_LAUNCH((RmsNormInputGradientKernel<X, Out>),
                 static_cast<unsigned int>(rows), RowBlockThreads(dim), stream)
  (dim, x, weight, inverse_rms, dout, dx);
  const RowParts parts = RowPartsOf(rows);
  const dim3 grid(
      static_cast<unsigned int>((dim + kBlockThreads - 1) / kBlockThreads),
      static_cast<unsigned int>(parts.parts));
  PLATEAU_LAUNCH(RmsNormWeightPartialsKernel<X>, grid, kBlockThreads, stream)
  (rows, dim, parts.rows_per_part, x, inverse_rms, dout, partials);
  PLATEAU_LAUNCH(RmsNormWeightFinishKernel,
                 static_cast<unsigned int>(GridStrideBlocks(dim)),
                 kBlockThreads, stream)
  (parts.parts, dim, partials, dweight);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRmsNormForward(int64_t rows, int64_t dim, const float* x,
                                 const float* weight, float epsilon, float* out,
                                 float* inverse_rms, cudaStream_t stream) {
  return LaunchRmsNormForwardAs(rows, dim, x, weight, epsilon, out, inverse_rms,
                                stream);
}

cudaError_t LaunchRmsNormForwardToBf16(int64_t rows, int64_t dim,
                                       const float* x, const float* weight,
                                       float epsilon, uint16_t* out,
                                       float* inverse_rms,
                                       cudaStream_t stream) {
  return LaunchRmsNormForwardAs(rows, dim, x, weight, epsilon, out, inverse_rms,
                                stream);
}

cudaError_t LaunchRmsNormBackward(int64_t rows, int64_t dim, const float* x,
                                  const float* weight, const float* inverse_rms,
                                  const float* dout, float* dx, float* dweight,
                                  float* partials, cudaStream_t stream) {
  return LaunchRmsNormBackwardAs(rows, dim, x, weight, inverse_rms, dout, dx,
                                 dweight, partials, stream);
}

cudaError_t LaunchRmsNormBackward(int64_t rows, int64_t dim, const float* x,
                                  const float* weight, const float* inverse_rms,
                                  const float* dout, uint16_t* dx,
                                  float* dweight, float* partials,
                                  cudaStream_t stream) {
  return LaunchRmsNormBackwardAs(rows, dim, x, weight, inverse_rms, dout, dx,
                                 dweight, partials, stream);
}

cudaError_t LaunchRmsNormBackward(int64_t rows, int64_t dim, const uint16_t* x,
                                  const float* weight, const float* inverse_rms,
                                  const float* dout, uint16_t* dx,
                                  float* dweight, float* partials,
                                  cudaStream_t stream) {
  return LaunchRmsNormBackwardAs(rows, dim, x, weight, inverse_rms, dout, dx,
                                 dweight, partials, stream);
}

cudaError_t LaunchRmsNormForwardBf16(int64_t rows, int64_t dim,
                                     const uint16_t* x, const float* weight,
                                     float epsilon, uint16_t* out,
                                     float* inverse_rms, cudaStream_t stream) {
  return LaunchRmsNormForwardAs(rows, dim, x, weight, epsilon, out, inverse_rms,
                                stream);
}

cudaError_t LaunchHeadRmsNormForward(int64_t rows, int64_t heads,
                                     int64_t head_dim, int64_t row_stride,
                                     const float* weight, float epsilon,
                                     float* x, cudaStream_t stream) {
  ForgetStaleError();
  if (rows == 0 || heads == 0) return cudaSuccess;
  PLATEAU_LAUNCH(HeadRmsNormForwardKernel,
                 static_cast<unsigned int>(rows * heads),
                 RowBlockThreads(head_dim), stream)
  (heads, head_dim, row_stride, weight, epsilon, x);
  return cudaGetLastError();
}

cudaError_t LaunchHeadRmsNormBackward(int64_t rows, int64_t heads,
                                      int64_t head_dim, const float* x,
                                      int64_t x_stride, const float* weight,
                                      float epsilon, int64_t row_stride,
                                      float* dx, float* dweight, float* scratch,
                                      cudaStream_t stream) {
  ForgetStaleError();
  if (rows == 0 || heads == 0) return cudaSuccess;
  const RowParts parts = RowPartsOf(rows);
  float* inverse_rms = scratch;
  float* partials = scratch + rows * heads;
  const unsigned int blocks = static_cast<unsigned int>(rows * heads);
  PLATEAU_LAUNCH(HeadInverseRmsKernel, blocks, RowBlockThreads(head_dim),
                 stream)
  (heads, head_dim, x, x_stride, epsilon, inverse_rms);
  const dim3 grid(
      static_cast<unsigned int>((head_dim + kBlockThreads - 1) / kBlockThreads),
      static_cast<unsigned int>(parts.parts));
  PLATEAU_LAUNCH(HeadRmsNormWeightPartialsKernel, grid, kBlockThreads, stream)
  (rows, heads, head_dim, parts.rows_per_part, x, x_stride, inverse_rms, dx,
   row_stride, partials);
  PLATEAU_LAUNCH(RmsNormWeightFinishKernel,
                 static_cast<unsigned int>(GridStrideBlocks(head_dim)),
                 kBlockThreads, stream)
  (parts.parts, head_dim, partials, dweight);
  PLATEAU_LAUNCH(HeadRmsNormInputGradientKernel, blocks,
                 RowBlockThreads(head_dim), stream)
  (heads, head_dim, x, x_stride, weight, inverse_rms, row_stride, dx);
  return cudaGetLastError();
}

cudaError_t LaunchRotary(int64_t rows, int64_t first_row, int64_t seq_len,
                         int64_t heads, int64_t head_dim, int64_t row_stride,
                         double theta, float sign, float* x,
                         cudaStream_t stream) {
  ForgetStaleError();
  const int64_t pairs = rows * heads * (head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  PLATEAU_LAUNCH(RotaryKernel,
                 static_cast<unsigned int>(GridStrideBlocks(pairs)),
                 kBlockThreads, stream)
  (rows, first_row, seq_len, heads, head_dim, row_stride, theta, sign, x);
  return cudaGetLastError();
}

}  // namespace plateau::kernels::cuda
