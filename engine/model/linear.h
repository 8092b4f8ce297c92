// The three products of a linear layer y = x W^T, W stored [out, in], as
// GemmArgs so that callers can run them alone or batched (one per expert):
//   forward:          y[rows, out]  (+)= x[rows, in] . W^T
//   input gradient:   dx[rows, in]  (+)= dy[rows, out] . W
//   weight gradient:  dW[out, in]    += dy^T . x
// in the given precision (kernels/ops.h, GemmPrecision): the model's
// (ModelConfig::matmul_precision) for the projections, float32 for the
// router's scores.
#ifndef PLATEAU_ENGINE_MODEL_LINEAR_H_
#define PLATEAU_ENGINE_MODEL_LINEAR_H_

#include <cstdint>

#include "kernels/ops.h"

namespace plateau::engine {

inline kernels::GemmArgs LinearForwardArgs(int64_t rows, int64_t in,
                                           int64_t out, const float* x,
                                           const float* weight, float* y,
                                           bool accumulate,
                                           kernels::GemmPrecision precision) {
  kernels::GemmArgs args;
  args.transpose_b = kernels::Transpose::kYes;
  args.m = rows;
  args.n = out;
  args.k = in;
  args.a = x;
  args.lda = in;
  args.b = weight;
  args.ldb = in;
  args.beta = accumulate ? 1.0f : 0.0f;
  args.c = y;
  args.ldc = out;
  args.precision = precision;
  return args;
}

inline kernels::GemmArgs LinearInputGradArgs(int64_t rows, int64_t in,
                                             int64_t out, const float* dy,
                                             const float* weight, float* dx,
                                             bool accumulate,
                                             kernels::GemmPrecision precision) {
  kernels::GemmArgs args;
  args.m = rows;
  args.n = in;
  args.k = out;
  args.a = dy;
  args.lda = out;
  args.b = weight;
  args.ldb = in;
  args.beta = accumulate ? 1.0f : 0.0f;
  args.c = dx;
  args.ldc = in;
  args.precision = precision;
  return args;
}

inline kernels::GemmArgs LinearWeightGradArgs(
    int64_t rows, int64_t in, int64_t out, const float* dy, const float* x,
    float* dweight, kernels::GemmPrecision precision) {
  kernels::GemmArgs args;
  args.transpose_a = kernels::Transpose::kYes;
  args.m = out;
  args.n = in;
  args.k = rows;
  args.a = dy;
  args.lda = out;
  args.b = x;
  args.ldb = in;
  args.beta = 1.0f;
  args.c = dweight;
  args.ldc = in;
  args.precision = precision;
  return args;
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_LINEAR_H_
