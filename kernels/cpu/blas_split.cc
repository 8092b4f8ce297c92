#include "kernels/cpu/blas_split.h"

#include <algorithm>

#include "kernels/cpu/blas.h"

namespace plateau::kernels::cpu {
namespace {

bool Fits(int64_t value, int64_t limit) { return value <= limit; }

CBLAS_TRANSPOSE ToCblas(Transpose transpose) {
  return transpose == Transpose::kYes ? CblasTrans : CblasNoTrans;
}

// REQUIRES: every size and leading dimension of args fits in blasint.
void CallSgemm(const GemmArgs& args) {
  Blas().sgemm(CblasRowMajor, ToCblas(args.transpose_a),
               ToCblas(args.transpose_b), static_cast<blasint>(args.m),
               static_cast<blasint>(args.n), static_cast<blasint>(args.k),
               args.alpha, args.a, static_cast<blasint>(args.lda), args.b,
               static_cast<blasint>(args.ldb), args.beta, args.c,
               static_cast<blasint>(args.ldc));
}

// The leading dimension a piece passes for a matrix of `rows` x `columns`
// (as stored) whose own leading dimension is `ld`: unchanged when it fits,
// else (the matrix then has a single row, see SplitGemmForBlas) the least
// valid one.
int64_t PieceLeadingDimension(int64_t ld, int64_t columns, int64_t limit) {
  return Fits(ld, limit) ? ld : std::max<int64_t>(columns, 1);
}

}  // namespace

void SplitGemmForBlas(const GemmArgs& args, int64_t limit,
                      const std::function<void(const GemmArgs&)>& piece) {
  if (args.m <= 0 || args.n <= 0) return;
  limit = std::max<int64_t>(limit, 1);
  const bool a_no = args.transpose_a == Transpose::kNo;
  const bool b_no = args.transpose_b == Transpose::kNo;
  // Stored row-major, a is [m, k] (a_no) or [k, m]; b is [k, n] (b_no) or
  // [n, k]; c is [m, n]. A leading dimension that does not fit forces single
  // rows along the dimension that indexes that matrix's stored rows.
  const bool a_rows_too_far = !Fits(args.lda, limit);
  const bool b_rows_too_far = !Fits(args.ldb, limit);
  const bool c_rows_too_far = !Fits(args.ldc, limit);
  const int64_t m_block =
      (c_rows_too_far || (a_no && a_rows_too_far)) ? 1 : limit;
  const int64_t n_block = (!b_no && b_rows_too_far) ? 1 : limit;
  const int64_t k_block =
      ((!a_no && a_rows_too_far) || (b_no && b_rows_too_far)) ? 1 : limit;
  for (int64_t row = 0; row < args.m; row += m_block) {
    for (int64_t column = 0; column < args.n; column += n_block) {
      // k == 0 still makes one piece per block of c: c = beta c.
      int64_t inner = 0;
      do {
        GemmArgs p = args;
        p.m = std::min(m_block, args.m - row);
        p.n = std::min(n_block, args.n - column);
        p.k = std::min(k_block, args.k - inner);
        p.a = args.a + (a_no ? row * args.lda + inner : inner * args.lda + row);
        p.b = args.b +
              (b_no ? inner * args.ldb + column : column * args.ldb + inner);
        p.c = args.c + row * args.ldc + column;
        p.lda = PieceLeadingDimension(args.lda, a_no ? p.k : p.m, limit);
        p.ldb = PieceLeadingDimension(args.ldb, b_no ? p.n : p.k, limit);
        p.ldc = PieceLeadingDimension(args.ldc, p.n, limit);
        if (inner > 0) p.beta = 1.0f;
        piece(p);
        inner += k_block;
      } while (inner < args.k);
    }
  }
}

void BlasGemm(const GemmArgs& args) {
  if (args.m <= 0 || args.n <= 0) return;
  if (Fits(args.m, kBlasIntMax) && Fits(args.n, kBlasIntMax) &&
      Fits(args.k, kBlasIntMax) && Fits(args.lda, kBlasIntMax) &&
      Fits(args.ldb, kBlasIntMax) && Fits(args.ldc, kBlasIntMax)) {
    CallSgemm(args);
    return;
  }
  SplitGemmForBlas(args, kBlasIntMax, CallSgemm);
}

float BlasDot(int64_t count, const float* x, const float* y) {
  if (count <= kBlasIntMax) {
    return Blas().sdot(static_cast<blasint>(count), x, 1, y, 1);
  }
  float sum = 0.0f;
  for (int64_t first = 0; first < count; first += kBlasIntMax) {
    const int64_t length = std::min(kBlasIntMax, count - first);
    sum +=
        Blas().sdot(static_cast<blasint>(length), x + first, 1, y + first, 1);
  }
  return sum;
}

}  // namespace plateau::kernels::cpu
