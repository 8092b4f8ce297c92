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
  if (absl::Status output = CheckBf16Output(args); !output.ok()) {
    Fail(std::move(output));
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

void CudaOps::SetMatmulStagingBytes(int64_t bytes) { staging_bytes_ = bytes; }

// cuBLAS's bf16 inputs with float32 accumulation. An operand given as bf16
// (GemmArgs::a_bf16, b_bf16) is read in place; a float32 one is rounded to
// bf16 first (to nearest even, as the CPU backend rounds it) into scratch.
// cuBLAS's own rounding of float32 inputs (CUBLAS_COMPUTE_32F_FAST_16BF) is
// not that: on an H200 its products differed from those of the inputs
// rounded to nearest even by up to 3e-2 on values of 0.2 to 7
// (docs/BENCHMARKS.md, "The CUDA backend"). A product written in bf16
// (c_bf16) is cuBLAS's bf16 output of its float32 sums.
//
// The copies take the staging's bytes (SetMatmulStagingBytes), as the CPU
// backend's do, so that the planner's prediction holds here too: a product
// whose copies do not fit whole goes in tiles of c, of whole rows and, only
// when b's copy would take more than half the staging, of column blocks,
// each tile's blocks of a and b rounded into dense copies. Every element of
// c is still one product over the whole of k.
void CudaOps::Bf16Gemm(const GemmArgs& args) {
  const bool round_a = args.a_bf16 == nullptr;
  const bool round_b = args.b_bf16 == nullptr;
  if (!round_a && !round_b) return GemmOfBf16(args, args.a_bf16, args.b_bf16);
  const bool a_transposed = args.transpose_a == Transpose::kYes;
  const bool b_transposed = args.transpose_b == Transpose::kYes;
  const int64_t k = args.k;
  constexpr int64_t kBf16Bytes = sizeof(uint16_t);
  // A tile's rows and columns: whole, or a multiple of kGrain that fits.
  constexpr int64_t kGrain = 16;
  const auto fitting = [&](int64_t bytes, int64_t whole) {
    const int64_t count = k == 0 ? whole : bytes / (k * kBf16Bytes);
    return count >= whole
               ? whole
               : std::min(whole, std::max(kGrain, count / kGrain * kGrain));
  };
  const int64_t whole_bytes =
      ((round_a ? args.m : 0) + (round_b ? args.n : 0)) * k * kBf16Bytes;
  const int64_t columns =
      !round_b || whole_bytes <= staging_bytes_
          ? args.n
          : fitting(round_a ? staging_bytes_ / 2 : staging_bytes_, args.n);
  ScratchLayout layout;
  // Each copy spans at least one element, so that cuBLAS never sees a null
  // matrix (k == 0: c = beta c).
  const int64_t b_offset =
      round_b ? layout.Add<uint16_t>(std::max<int64_t>(1, k * columns)) : 0;
  const int64_t rows =
      round_a ? fitting(staging_bytes_ - layout.bytes(), args.m) : args.m;
  const int64_t a_offset =
      round_a ? layout.Add<uint16_t>(std::max<int64_t>(1, rows * k)) : 0;
  char* scratch =
      Scratch(std::max(layout.bytes(), staging_bytes_), "bf16 product");
  if (scratch == nullptr) return;
  uint16_t* a_copy = At<uint16_t>(scratch, a_offset);
  uint16_t* b_copy = At<uint16_t>(scratch, b_offset);

  for (int64_t column = 0; column < args.n; column += columns) {
    GemmArgs tile = args;
    tile.n = std::min(columns, args.n - column);
    // op(b)'s columns [column, column + n): rows of b as stored [n, k],
    // columns of b as stored [k, n].
    const int64_t b_start = b_transposed ? column * args.ldb : column;
    const uint16_t* b = b_copy;
    if (!round_b) {
      b = args.b_bf16 + b_start;
    } else {
      const int64_t b_rows = b_transposed ? tile.n : k;
      const int64_t b_columns = b_transposed ? k : tile.n;
      if (!Check(LaunchCopyMatrixToBf16(b_rows, b_columns, args.b + b_start,
                                        args.ldb, b_copy, b_columns,
                                        compute_stream_),
                 "bf16 product")) {
        return;
      }
      tile.ldb = std::max<int64_t>(1, b_columns);
    }
    for (int64_t row = 0; row < args.m; row += rows) {
      tile.m = std::min(rows, args.m - row);
      if (args.c_bf16 != nullptr) {
        tile.c_bf16 = args.c_bf16 + row * args.ldc + column;
      } else {
        tile.c = args.c + row * args.ldc + column;
      }
      // op(a)'s rows [row, row + m): rows of a as stored [m, k], columns of
      // a as stored [k, m].
      const int64_t a_start = a_transposed ? row : row * args.lda;
      const uint16_t* a = a_copy;
      if (!round_a) {
        a = args.a_bf16 + a_start;
      } else {
        const int64_t a_rows = a_transposed ? k : tile.m;
        const int64_t a_columns = a_transposed ? tile.m : k;
        if (!Check(LaunchCopyMatrixToBf16(a_rows, a_columns, args.a + a_start,
                                          args.lda, a_copy, a_columns,
                                          compute_stream_),
                   "bf16 product")) {
          return;
        }
        tile.lda = std::max<int64_t>(1, a_columns);
      }
      GemmOfBf16(tile, a, b);
    }
  }
}

void CudaOps::GemmOfBf16(const GemmArgs& args, const uint16_t* a,
                         const uint16_t* b) {
  CheckBlas(
      cublas_.gemm(blas_, BlasOperation(args.transpose_b),
                   BlasOperation(args.transpose_a), static_cast<int>(args.n),
                   static_cast<int>(args.m), static_cast<int>(args.k),
                   &args.alpha, b, CUDA_R_16BF, static_cast<int>(args.ldb), a,
                   CUDA_R_16BF, static_cast<int>(args.lda), &args.beta,
                   args.c_bf16 != nullptr ? static_cast<void*>(args.c_bf16)
                                          : static_cast<void*>(args.c),
                   args.c_bf16 != nullptr ? CUDA_R_16BF : CUDA_R_32F,
                   static_cast<int>(args.ldc), CUBLAS_COMPUTE_32F,
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
