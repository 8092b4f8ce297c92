// The three products of a linear layer y = x W^T, W stored [out, in], as
// GemmArgs so that callers can run them alone or batched (one per expert):
//   forward:          y[rows, out]  (+)= x[rows, in] . W^T
//   input gradient:   dx[rows, in]  (+)= dy[rows, out] . W
//   weight gradient:  dW[out, in]    += dy^T . x
// in the given precision (kernels/ops.h, GemmPrecision): the model's
// (ModelConfig::matmul_precision) for the projections, float32 for the
// router's scores. x is float32, or bf16 where the model stores it so
// (ProductInputType, model_config.h); it then takes bf16 products.
#ifndef PLATEAU_ENGINE_MODEL_LINEAR_H_
#define PLATEAU_ENGINE_MODEL_LINEAR_H_

#include <cstdint>

#include "engine/memory/tensor.h"
#include "kernels/ops.h"

namespace plateau::engine {

// A linear layer's input x: float32 values or bf16 ones.
struct LinearInput {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;

  const void* data() const {
    return bf16 != nullptr ? static_cast<const void*>(bf16) : f32;
  }
};

inline LinearInput FloatInput(const float* x) { return {x, nullptr}; }

// Rows [first_row, ...) of a [rows, columns] float32 or bf16 tensor.
inline LinearInput RowsOf(const Tensor& x, int64_t first_row = 0) {
  const int64_t offset = first_row * x.dim(1);
  if (x.dtype() == DType::kBfloat16) return {nullptr, x.bf16() + offset};
  return {x.f32() + offset, nullptr};
}

inline kernels::GemmArgs LinearForwardArgs(int64_t rows, int64_t in,
                                           int64_t out, LinearInput x,
                                           const float* weight, float* y,
                                           bool accumulate,
                                           kernels::GemmPrecision precision) {
  kernels::GemmArgs args;
  args.transpose_b = kernels::Transpose::kYes;
  args.m = rows;
  args.n = out;
  args.k = in;
  args.a = x.f32;
  args.a_bf16 = x.bf16;
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
    int64_t rows, int64_t in, int64_t out, const float* dy, LinearInput x,
    float* dweight, kernels::GemmPrecision precision) {
  kernels::GemmArgs args;
  args.transpose_a = kernels::Transpose::kYes;
  args.m = out;
  args.n = in;
  args.k = rows;
  args.a = dy;
  args.lda = out;
  args.b = x.f32;
  args.b_bf16 = x.bf16;
  args.ldb = in;
  args.beta = 1.0f;
  args.c = dweight;
  args.ldc = in;
  args.precision = precision;
  return args;
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_LINEAR_H_
