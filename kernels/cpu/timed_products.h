// Matrix products to time the CPU backend's kernels with (bf16_speedup.h,
// tests/bench/cpu_products_bench): a product's shape, and operands for it
// in both storage types, the same values in float32 and in bf16.
#ifndef PLATEAU_KERNELS_CPU_TIMED_PRODUCTS_H_
#define PLATEAU_KERNELS_CPU_TIMED_PRODUCTS_H_

#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace plateau::kernels::cpu {

// c [m, n] = op(a) op(b), a stored [m, k] (or [k, m] transposed), b [k, n]
// (or [n, k]).
struct ProductShape {
  int64_t m, n, k;
  Transpose transpose_a, transpose_b;
};

class ProductOperands {
 public:
  // Fixed values in [-1, 1] for a and [-0.05, 0.05] for b, and their bf16
  // copies; c zeros.
  explicit ProductOperands(const ProductShape& shape);

  // The product in float32 on the float32 operands, or (bf16) a bf16 one
  // on the bf16 copies, as the engine passes operands stored in bf16;
  // either writes c in float32. Valid while the operands live.
  GemmArgs Args(bool bf16);

 private:
  ProductShape shape_;
  std::vector<float> a_, b_, c_;
  std::vector<uint16_t> a_bf16_, b_bf16_;
};

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_TIMED_PRODUCTS_H_
