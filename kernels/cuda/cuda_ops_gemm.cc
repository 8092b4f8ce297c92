#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {

// A float32 product exactly or as tf32, as the backend was made.
cublasComputeType_t CudaOps::Float32ComputeType() const {
  return matmul_precision_ == MatmulPrecision::kFloat32
             ? CUBLAS_COMPUTE_32F
             : CUBLAS_COMPUTE_32F_FAST_TF32;
}

// The elements a stored operand spans: `rows` rows of leading dimension
// `leading`, the last `columns` wide.
int64_t SpannedElements(int64_t rows, int64_t columns, int64_t leading) {
  return rows == 0 || columns == 0 ? 0 : (rows - 1) * leading + columns;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
// operands swap, each keeping its transpose flag.
void CudaOps::Gemm(const GemmArgs& args) {
  if (failed() || args.m == 0 || args.n == 0) return;
  if (!GemmFitsInt(args)) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "CUDA Gemm: a size or leading dimension exceeds 2^31 - 1 (m ", args.m,
        ", n ", args.n, ", k ", args.k, ")")));
    return;
  }
  if (IsBf16Product(args)) return Bf16Gemm(args);
  CheckBlas(
      cublas_.gemm(blas_, BlasOperation(args.transpose_b),
                   BlasOperation(args.transpose_a), static_cast<int>(args.n),
                   static_cast<int>(args.m), static_cast<int>(args.k),
                   &args.alpha, args.b, CUDA_R_32F, static_cast<int>(args.ldb),
                   args.a, CUDA_R_32F, static_cast<int>(args.lda), &args.beta,
                   args.c, CUDA_R_32F, static_cast<int>(args.ldc),
                   Float32ComputeType(), CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

// cuBLAS's bf16 inputs with float32 accumulation. An operand given as bf16
// (GemmArgs::a_bf16, b_bf16) is read in place; a float32 one is rounded to
// bf16 first (to nearest even, as the CPU backend rounds it) into scratch,
// half its bytes. cuBLAS's own rounding of float32 inputs
// (CUBLAS_COMPUTE_32F_FAST_16BF) is not that: on an H200 its products
// differed from those of the inputs rounded to nearest even by up to 3e-2
// on values of 0.2 to 7 (docs/BENCHMARKS.md, "The CUDA backend").
void CudaOps::Bf16Gemm(const GemmArgs& args) {
  // The elements an operand spans as stored: a is [m, k] ([k, m]
  // transposed), b [k, n] ([n, k] transposed).
  const auto spanned = [&](bool of_a) {
    const bool transposed =
        (of_a ? args.transpose_a : args.transpose_b) == Transpose::kYes;
    const int64_t outer = of_a ? args.m : args.k;
    const int64_t inner = of_a ? args.k : args.n;
    return SpannedElements(transposed ? inner : outer,
                           transposed ? outer : inner,
                           of_a ? args.lda : args.ldb);
  };
  const int64_t a_elements = args.a_bf16 == nullptr ? spanned(true) : 0;
  const int64_t b_elements = args.b_bf16 == nullptr ? spanned(false) : 0;
  const uint16_t* a = args.a_bf16;
  const uint16_t* b = args.b_bf16;
  if (a == nullptr || b == nullptr) {
    // b's part starts 16-byte aligned, as the tensor cores want it. An
    // operand that spans nothing (k == 0: c = beta c) still gets a place,
    // so that cuBLAS never sees a null matrix.
    const int64_t b_offset =
        (a_elements * int64_t{sizeof(uint16_t)} + 15) / 16 * 16;
    char* scratch =
        Scratch(b_offset + b_elements * int64_t{sizeof(uint16_t)}, "Gemm");
    if (scratch == nullptr) return;
    // x's `count` elements rounded at `offset` in scratch; null on failure.
    const auto round = [&](const float* x, int64_t count,
                           int64_t offset) -> const uint16_t* {
      uint16_t* rounded = At<uint16_t>(scratch, offset);
      if (count > 0 &&
          !Check(LaunchCopyToBf16(count, x, rounded, compute_stream_),
                 "Gemm")) {
        return nullptr;
      }
      return rounded;
    };
    if (a == nullptr && (a = round(args.a, a_elements, 0)) == nullptr) return;
    if (b == nullptr && (b = round(args.b, b_elements, b_offset)) == nullptr) {
      return;
    }
  }
  CheckBlas(
      cublas_.gemm(blas_, BlasOperation(args.transpose_b),
                   BlasOperation(args.transpose_a), static_cast<int>(args.n),
                   static_cast<int>(args.m), static_cast<int>(args.k),
                   &args.alpha, b, CUDA_R_16BF, static_cast<int>(args.ldb), a,
                   CUDA_R_16BF, static_cast<int>(args.lda), &args.beta, args.c,
                   CUDA_R_32F, static_cast<int>(args.ldc), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

// One group per product (their shapes differ, expert by expert); the
// pointer arrays go to scratch, the rest stays on the host. cuBLAS's
// grouped products are documented for float32 inputs exactly or as tf32,
// so bf16 problems run one cublasGemmEx each.
void CudaOps::GroupedGemm(absl::Span<const GemmArgs> problems) {
  if (failed()) return;
  std::vector<GemmArgs> work;
  for (const GemmArgs& args : problems) {
    if (args.m == 0 || args.n == 0) continue;
    if (!GemmFitsInt(args)) return Gemm(args);  // records the error
    if (IsBf16Product(args)) {
      Gemm(args);
    } else {
      work.push_back(args);
    }
  }
  if (work.empty()) return;
  if (work.size() == 1) return Gemm(work[0]);
  const int count = static_cast<int>(work.size());
  std::vector<cublasOperation_t> transa(count), transb(count);
  std::vector<int> m(count), n(count), k(count), lda(count), ldb(count),
      ldc(count), group_size(count, 1);
  std::vector<float> alpha(count), beta(count);
  std::vector<const void*> a(count), b(count);
  std::vector<void*> c(count);
  for (int i = 0; i < count; ++i) {
    const GemmArgs& args = work[i];
    transa[i] = BlasOperation(args.transpose_b);
    transb[i] = BlasOperation(args.transpose_a);
    m[i] = static_cast<int>(args.n);
    n[i] = static_cast<int>(args.m);
    k[i] = static_cast<int>(args.k);
    a[i] = args.b;
    lda[i] = static_cast<int>(args.ldb);
    b[i] = args.a;
    ldb[i] = static_cast<int>(args.lda);
    c[i] = args.c;
    ldc[i] = static_cast<int>(args.ldc);
    alpha[i] = args.alpha;
    beta[i] = args.beta;
  }
  const int64_t pointer_bytes = count * static_cast<int64_t>(sizeof(void*));
  const std::vector<char*> places = UploadAll({{a.data(), pointer_bytes},
                                               {b.data(), pointer_bytes},
                                               {c.data(), pointer_bytes}},
                                              0, "GroupedGemm");
  if (places.empty()) return;
  // Its tensor-core kernels want 16-byte aligned matrices (an expert's rows
  // start anywhere), so a misaligned group runs exactly.
  bool aligned = true;
  for (const GemmArgs& args : work) {
    aligned =
        aligned && Aligned16(args.a) && Aligned16(args.b) && Aligned16(args.c);
  }
  const cublasComputeType_t compute =
      aligned ? Float32ComputeType() : CUBLAS_COMPUTE_32F;
  CheckBlas(
      cublas_.grouped_gemm(
          blas_, transa.data(), transb.data(), m.data(), n.data(), k.data(),
          alpha.data(), At<const void* const>(places[0], 0), CUDA_R_32F,
          lda.data(), At<const void* const>(places[1], 0), CUDA_R_32F,
          ldb.data(), beta.data(), At<void* const>(places[2], 0), CUDA_R_32F,
          ldc.data(), count, group_size.data(), compute),
      "cublasGemmGroupedBatchedEx");
}

}  // namespace plateau::kernels::cuda
