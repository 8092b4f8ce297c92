// bf16 matrix products for CPUs where oneDNN has no bf16 kernel (below
// AVX-512): our own, because a library's float32 kernels sum a row of c in
// an order that depends on where the row falls among a call's rows
// (OpenBLAS's AVX2 ones do), and a bf16 product's results must not change
// with the rows it is made with, the pieces it is cut into or the planner's
// staging.
//
// The guarantee: every element of c is
//   alpha * (sum over k = 0, 1, ..., K-1 of a[i][k] * b[k][j]) + beta * c
// with a and b rounded to bf16 (to nearest even; bf16 operands taken as
// they are), the sum one float32 accumulator added to in k order. A product
// of two bf16 values is exact in float32, so the AVX2 kernel's fused
// multiply-adds and the scalar kernel's multiply-then-add give the same bits
// (unless a product underflows float32). Nothing else enters: not the rows
// or columns made with it, not the blocking, not the thread.
//
// The operands are first packed: a's rows in panels of kPanelRows, b's
// columns in panels of kPanelColumns, each panel k-major, padded with zeros,
// rounded as it is copied. Packing is the one copy the product makes, and
// panels of one operand can be packed by several threads at once.
#ifndef PLATEAU_KERNELS_CPU_FIXED_ORDER_GEMM_H_
#define PLATEAU_KERNELS_CPU_FIXED_ORDER_GEMM_H_

#include <cstdint>

namespace plateau::kernels::cpu {

inline constexpr int64_t kPanelRows = 4;
inline constexpr int64_t kPanelColumns = 24;

// A stored row-major matrix of float32 values, or of bf16 ones (their bits):
// exactly one of `values` and `bf16` is set.
struct StoredMatrix {
  const float* values = nullptr;
  const uint16_t* bf16 = nullptr;
  int64_t stride = 0;  // elements from one stored row to the next
};

// Floats that the panels of `rows` rows, or `columns` columns, of length k
// take.
int64_t PackedRowsElements(int64_t rows, int64_t k);
int64_t PackedColumnsElements(int64_t columns, int64_t k);

// Packs the panels [first_panel, end_panel) of the `rows` rows of op(a), a
// rows x k matrix stored [rows, k], or [k, rows] when `transposed`, into
// `packed` (PackedRowsElements(rows, k) floats, panel p at p * kPanelRows * k).
void PackRows(const StoredMatrix& a, bool transposed, int64_t rows, int64_t k,
              int64_t first_panel, int64_t end_panel, float* packed);

// Likewise the `columns` columns of op(b), a k x columns matrix stored
// [k, columns], or [columns, k] when `transposed`, in panels of
// kPanelColumns.
void PackColumns(const StoredMatrix& b, bool transposed, int64_t columns,
                 int64_t k, int64_t first_panel, int64_t end_panel,
                 float* packed);

// c[rows, columns] (row stride ldc) = alpha * a . b + beta * c, from the
// panels of a's rows (packed_rows: its first row's panel) and of b's
// columns. Written in float32 to c, or rounded once to bf16 into c_bf16
// (then beta is 0). On the calling thread. REQUIRES: k >= 1.
void FixedOrderProduct(int64_t rows, int64_t columns, int64_t k,
                       const float* packed_rows, const float* packed_columns,
                       float alpha, float beta, float* c, uint16_t* c_bf16,
                       int64_t ldc);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_FIXED_ORDER_GEMM_H_
