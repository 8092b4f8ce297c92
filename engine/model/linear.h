// The three products of a linear layer y = x W^T, W stored [out, in], as
// GemmArgs so that callers can run them alone or batched (one per expert):
//   forward:          y[rows, out]  (+)= x[rows, in] . W^T
//   input gradient:   dx[rows, in]  (+)= dy[rows, out] . W
//   weight gradient:  dW[out, in]    += dy^T . x
// in the given precision (kernels/ops.h, GemmPrecision): the model's
// (ModelConfig::matmul_precision) for the projections, float32 for the
// router's scores. x is float32, or bf16 where the model stores it so
// (ProductInputType, model_config.h); W is float32, or under bf16 products
// the pass's bf16 copy of it (Model::LayerWeightsForPass); dy is float32, or
// bf16 where the model stores it so (the logits' gradient, logits.h; the
// experts' gate and up gradients, experts.cc). A bf16 operand makes a bf16
// product.
#ifndef PLATEAU_ENGINE_MODEL_LINEAR_H_
#define PLATEAU_ENGINE_MODEL_LINEAR_H_

#include <cstdint>
#include <type_traits>

#include "engine/memory/tensor.h"
#include "kernels/ops.h"

namespace plateau::engine {

// An operand of a linear layer's products (its input x or its weight W):
// float32 values, bf16 ones, or both (a weight and its bf16 copy; the bf16
// ones are what travels and what data() gives).
struct LinearOperand {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;

  const void* data() const {
    return bf16 != nullptr ? static_cast<const void*>(bf16) : f32;
  }
  int64_t element_bytes() const {
    return bf16 != nullptr ? int64_t{sizeof(uint16_t)} : int64_t{sizeof(float)};
  }
  // The operand `elements` further on.
  LinearOperand At(int64_t elements) const {
    return {f32 == nullptr ? nullptr : f32 + elements,
            bf16 == nullptr ? nullptr : bf16 + elements};
  }
};

inline LinearOperand FloatOperand(const float* x) { return {x, nullptr}; }

// A product's weight matrix in a parameters struct (AttentionParameters<T>
// and the others): in the weights (T = const float) the operand the
// products read, its float32 values and the pass's bf16 copy where it has
// one; in the gradients (T = float) the float32 values they accumulate
// into.
template <typename T>
using ProductWeight = std::conditional_t<std::is_const_v<T>, LinearOperand, T*>;

// The ProductWeight at `values`: a weight's float32 operand, or a gradient.
inline LinearOperand ProductWeightAt(const float* values) {
  return FloatOperand(values);
}
inline float* ProductWeightAt(float* values) { return values; }

// Rows [first_row, ...) of a [rows, columns] float32 or bf16 tensor.
inline LinearOperand RowsOf(const Tensor& x, int64_t first_row = 0) {
  const int64_t offset = first_row * x.dim(1);
  if (x.dtype() == DType::kBfloat16) return {nullptr, x.bf16() + offset};
  return {x.f32() + offset, nullptr};
}

inline kernels::GemmArgs LinearForwardArgs(int64_t rows, int64_t in,
                                           int64_t out, LinearOperand x,
                                           LinearOperand weight, float* y,
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
  args.b = weight.f32;
  args.b_bf16 = weight.bf16;
  args.ldb = in;
  args.beta = accumulate ? 1.0f : 0.0f;
  args.c = y;
  args.ldc = out;
  args.precision = precision;
  return args;
}

inline kernels::GemmArgs LinearInputGradArgs(int64_t rows, int64_t in,
                                             int64_t out, LinearOperand dy,
                                             LinearOperand weight, float* dx,
                                             bool accumulate,
                                             kernels::GemmPrecision precision) {
  kernels::GemmArgs args;
  args.m = rows;
  args.n = in;
  args.k = out;
  args.a = dy.f32;
  args.a_bf16 = dy.bf16;
  args.lda = out;
  args.b = weight.f32;
  args.b_bf16 = weight.bf16;
  args.ldb = in;
  args.beta = accumulate ? 1.0f : 0.0f;
  args.c = dx;
  args.ldc = in;
  args.precision = precision;
  return args;
}

inline kernels::GemmArgs LinearWeightGradArgs(
    int64_t rows, int64_t in, int64_t out, LinearOperand dy, LinearOperand x,
    float* dweight, kernels::GemmPrecision precision) {
  kernels::GemmArgs args;
  args.transpose_a = kernels::Transpose::kYes;
  args.m = out;
  args.n = in;
  args.k = rows;
  args.a = dy.f32;
  args.a_bf16 = dy.bf16;
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

// The same with a float32 dy.
inline kernels::GemmArgs LinearInputGradArgs(int64_t rows, int64_t in,
                                             int64_t out, const float* dy,
                                             LinearOperand weight, float* dx,
                                             bool accumulate,
                                             kernels::GemmPrecision precision) {
  return LinearInputGradArgs(rows, in, out, FloatOperand(dy), weight, dx,
                             accumulate, precision);
}
inline kernels::GemmArgs LinearWeightGradArgs(
    int64_t rows, int64_t in, int64_t out, const float* dy, LinearOperand x,
    float* dweight, kernels::GemmPrecision precision) {
  return LinearWeightGradArgs(rows, in, out, FloatOperand(dy), x, dweight,
                              precision);
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_LINEAR_H_
