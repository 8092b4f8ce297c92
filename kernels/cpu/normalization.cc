// CpuOps RMSNorm (and the gather of RMSNorm'd rows, the same arithmetic)
// and rotary embedding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas_split.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int64_t kRowGrain = 8;
// The norms' weight gradients are summed over rows in this many partials,
// one per range of rows, added in order: a fixed number, not one per thread,
// so that the sums do not depend on the thread count. Their backward passes
// use at most this many threads.
constexpr int64_t kWeightGradientPartials = 16;

__attribute__((target_clones("avx512f", "avx2", "default"))) void ScaleByWeight(
    int64_t dim, const float* x, float inverse_rms, const float* weight,
    float* out) {
  for (int64_t j = 0; j < dim; ++j) out[j] = x[j] * inverse_rms * weight[j];
}

// dx += r * w * g - r^3 * x * (sum_j g_j w_j x_j) / dim, for one row.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
RmsNormRowBackward(int64_t dim, const float* x, const float* weight,
                   float inverse_rms, const float* dout, float* dx,
                   float* dweight) {
  float dot = 0.0f;
  for (int64_t j = 0; j < dim; ++j) dot += dout[j] * weight[j] * x[j];
  const float correction =
      inverse_rms * inverse_rms * inverse_rms * dot / static_cast<float>(dim);
  for (int64_t j = 0; j < dim; ++j) {
    dx[j] += inverse_rms * weight[j] * dout[j] - correction * x[j];
    dweight[j] += dout[j] * x[j] * inverse_rms;
  }
}

float InverseRms(int64_t dim, const float* x, float epsilon) {
  return 1.0f /
         std::sqrt(BlasDot(dim, x, x) / static_cast<float>(dim) + epsilon);
}

// The input's gradient over the output's, in place, for one head:
// g <- r * w * g - r^3 * x * (sum_j g_j w_j x_j) / dim; dweight += g x r.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
HeadRmsNormBackwardInPlace(int64_t dim, const float* x, const float* weight,
                           float inverse_rms, float* gradient, float* dweight) {
  float dot = 0.0f;
  for (int64_t j = 0; j < dim; ++j) dot += gradient[j] * weight[j] * x[j];
  const float correction =
      inverse_rms * inverse_rms * inverse_rms * dot / static_cast<float>(dim);
  for (int64_t j = 0; j < dim; ++j) {
    const float g = gradient[j];
    dweight[j] += g * x[j] * inverse_rms;
    gradient[j] = inverse_rms * weight[j] * g - correction * x[j];
  }
}

// Rotates every head of `row` by the angles in cosines/sines.
void RotateRow(int64_t heads, int64_t head_dim, const float* cosines,
               const float* sines, float* row) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* first = row + h * head_dim;
    float* second = first + half;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = first[i];
      const float x2 = second[i];
      first[i] = x1 * cosines[i] - x2 * sines[i];
      second[i] = x2 * cosines[i] + x1 * sines[i];
    }
  }
}

// Work is split by position: each position's angles are computed once (in
// double: position * frequency loses digits in float at long context) and
// applied to that position's row in every sequence. sign -1 applies the
// inverse rotation (the backward pass).
void Rotate(ThreadPool& pool, int64_t rows, int64_t first_row, int64_t seq_len,
            int64_t heads, int64_t head_dim, int64_t row_stride, double theta,
            float sign, float* x) {
  const int64_t half = head_dim / 2;
  std::vector<double> frequencies(half);
  for (int64_t i = 0; i < half; ++i) {
    frequencies[i] = std::pow(
        theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  // Rows first_row, first_row + seq_len, ... share a position.
  const int64_t distinct = std::min(rows, seq_len);
  pool.ParallelFor(distinct, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> cosines(half), sines(half);
    for (int64_t first = begin; first < end; ++first) {
      const int64_t position = (first_row + first) % seq_len;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(position) * frequencies[i];
        cosines[i] = static_cast<float>(std::cos(angle));
        sines[i] = sign * static_cast<float>(std::sin(angle));
      }
      for (int64_t r = first; r < rows; r += seq_len) {
        RotateRow(heads, head_dim, cosines.data(), sines.data(),
                  x + r * row_stride);
      }
    }
  });
}

// Calls row(r, partial) for every row r, where partial is the weight
// gradient [dim] of r's range of rows, then adds the partials to dweight in
// order. The kWeightGradientPartials ranges are dealt to the threads in
// contiguous runs, and each partial has cache lines of its own.
template <typename Row>
void AccumulateOverRows(ThreadPool& pool, int64_t rows, int64_t dim,
                        float* dweight, Row row) {
  constexpr int64_t kLineFloats = 16;
  const int64_t stride =
      (dim + kLineFloats - 1) / kLineFloats * kLineFloats + kLineFloats;
  std::vector<float> partials(kWeightGradientPartials * stride, 0.0f);
  pool.ParallelFor(
      kWeightGradientPartials, 1, [&](int64_t first, int64_t last) {
        for (int64_t part = first; part < last; ++part) {
          const int64_t begin =
              PartBegin(rows, kRowGrain, kWeightGradientPartials, part);
          const int64_t end =
              PartBegin(rows, kRowGrain, kWeightGradientPartials, part + 1);
          for (int64_t r = begin; r < end; ++r) {
            row(r, partials.data() + part * stride);
          }
        }
      });
  for (int64_t part = 0; part < kWeightGradientPartials; ++part) {
    for (int64_t j = 0; j < dim; ++j) dweight[j] += partials[part * stride + j];
  }
}

// The norm of x (float32, or bf16 widened a row at a time) rounded to bf16.
template <typename X>
void RmsNormForwardToBf16Of(ThreadPool& pool, int64_t rows, int64_t dim,
                            const X* x, const float* weight, float epsilon,
                            uint16_t* out, float* inverse_rms) {
  pool.ParallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> widened, normed(dim);
    for (int64_t r = begin; r < end; ++r) {
      const float* row = RowValues(x + r * dim, dim, widened);
      inverse_rms[r] = InverseRms(dim, row, epsilon);
      ScaleByWeight(dim, row, inverse_rms[r], weight, normed.data());
      ConvertToBf16(normed, absl::MakeSpan(out + r * dim, dim));
    }
  });
}

// RmsNormBackward into a bf16 dx, from x float32 or bf16 (widened a row at
// a time): each dx row widened, the float32 sum rounded once.
template <typename X>
void RmsNormBackwardToBf16Of(ThreadPool& pool, int64_t rows, int64_t dim,
                             const X* x, const float* weight,
                             const float* inverse_rms, const float* dout,
                             uint16_t* dx, float* dweight) {
  AccumulateOverRows(pool, rows, dim, dweight, [&](int64_t r, float* partial) {
    thread_local std::vector<float> widened, sum;
    sum.resize(dim);
    uint16_t* row = dx + r * dim;
    WidenBf16(absl::MakeConstSpan(row, dim), absl::MakeSpan(sum));
    RmsNormRowBackward(dim, RowValues(x + r * dim, dim, widened), weight,
                       inverse_rms[r], dout + r * dim, sum.data(), partial);
    ConvertToBf16(sum, absl::MakeSpan(row, dim));
  });
}

}  // namespace

void CpuOps::RmsNormForward(int64_t rows, int64_t dim, const float* x,
                            const float* weight, float epsilon, float* out,
                            float* inverse_rms) {
  pool_.ParallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * dim;
      inverse_rms[r] = InverseRms(dim, row, epsilon);
      ScaleByWeight(dim, row, inverse_rms[r], weight, out + r * dim);
    }
  });
}

void CpuOps::RmsNormForwardToBf16(int64_t rows, int64_t dim, const float* x,
                                  const float* weight, float epsilon,
                                  uint16_t* out, float* inverse_rms) {
  RmsNormForwardToBf16Of(pool_, rows, dim, x, weight, epsilon, out,
                         inverse_rms);
}

void CpuOps::RmsNormForwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                                const float* weight, float epsilon,
                                uint16_t* out, float* inverse_rms) {
  RmsNormForwardToBf16Of(pool_, rows, dim, x, weight, epsilon, out,
                         inverse_rms);
}

void CpuOps::GatherRmsNormedRows(int64_t rows, int64_t dim, const float* x,
                                 const float* inverse_rms, const float* weight,
                                 const int32_t* row_token, float* out) {
  pool_.ParallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t token = row_token[r];
      ScaleByWeight(dim, x + token * dim, inverse_rms[token], weight,
                    out + r * dim);
    }
  });
}

void CpuOps::GatherRmsNormedRowsToBf16(int64_t rows, int64_t dim,
                                       const float* x, const float* inverse_rms,
                                       const float* weight,
                                       const int32_t* row_token,
                                       uint16_t* out) {
  pool_.ParallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> normed(dim);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t token = row_token[r];
      ScaleByWeight(dim, x + token * dim, inverse_rms[token], weight,
                    normed.data());
      ConvertToBf16(normed, absl::MakeSpan(out + r * dim, dim));
    }
  });
}

void CpuOps::RmsNormBackward(int64_t rows, int64_t dim, const float* x,
                             const float* weight, const float* inverse_rms,
                             const float* dout, float* dx, float* dweight) {
  AccumulateOverRows(pool_, rows, dim, dweight, [&](int64_t r, float* partial) {
    RmsNormRowBackward(dim, x + r * dim, weight, inverse_rms[r], dout + r * dim,
                       dx + r * dim, partial);
  });
}

void CpuOps::RmsNormBackwardToBf16(int64_t rows, int64_t dim, const float* x,
                                   const float* weight,
                                   const float* inverse_rms, const float* dout,
                                   uint16_t* dx, float* dweight) {
  RmsNormBackwardToBf16Of(pool_, rows, dim, x, weight, inverse_rms, dout, dx,
                          dweight);
}

void CpuOps::RmsNormBackwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                                 const float* weight, const float* inverse_rms,
                                 const float* dout, uint16_t* dx,
                                 float* dweight) {
  RmsNormBackwardToBf16Of(pool_, rows, dim, x, weight, inverse_rms, dout, dx,
                          dweight);
}

void CpuOps::HeadRmsNormForward(int64_t rows, int64_t heads, int64_t head_dim,
                                int64_t row_stride, const float* weight,
                                float epsilon, float* x) {
  pool_.ParallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        float* head = x + r * row_stride + h * head_dim;
        ScaleByWeight(head_dim, head, InverseRms(head_dim, head, epsilon),
                      weight, head);
      }
    }
  });
}

void CpuOps::HeadRmsNormBackward(int64_t rows, int64_t heads, int64_t head_dim,
                                 const float* x, int64_t x_stride,
                                 const float* weight, float epsilon,
                                 int64_t row_stride, float* dx,
                                 float* dweight) {
  AccumulateOverRows(
      pool_, rows, head_dim, dweight, [&](int64_t r, float* partial) {
        for (int64_t h = 0; h < heads; ++h) {
          const float* input = x + r * x_stride + h * head_dim;
          HeadRmsNormBackwardInPlace(
              head_dim, input, weight, InverseRms(head_dim, input, epsilon),
              dx + r * row_stride + h * head_dim, partial);
        }
      });
}

void CpuOps::RotaryForward(int64_t rows, int64_t first_row, int64_t seq_len,
                           int64_t heads, int64_t head_dim, int64_t row_stride,
                           double theta, float* x) {
  Rotate(pool_, rows, first_row, seq_len, heads, head_dim, row_stride, theta,
         1.0f, x);
}

void CpuOps::RotaryBackward(int64_t rows, int64_t first_row, int64_t seq_len,
                            int64_t heads, int64_t head_dim, int64_t row_stride,
                            double theta, float* dx) {
  Rotate(pool_, rows, first_row, seq_len, heads, head_dim, row_stride, theta,
         -1.0f, dx);
}

}  // namespace plateau::kernels::cpu
