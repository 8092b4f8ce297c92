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

// A bf16 product runs on the tensor cores with its float32 inputs rounded
// to bf16 (CUBLAS_COMPUTE_32F_FAST_16BF); a float32 one exactly or as tf32,
// as the backend was made.
cublasComputeType_t CudaOps::ComputeType(GemmPrecision precision) const {
  if (precision == GemmPrecision::kBf16) return CUBLAS_COMPUTE_32F_FAST_16BF;
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
  if (args.a_bf16 != nullptr || args.b_bf16 != nullptr) {
    return Bf16OperandGemm(args);
  }
  CheckBlas(
      cublas_.gemm(blas_, BlasOperation(args.transpose_b),
                   BlasOperation(args.transpose_a), static_cast<int>(args.n),
                   static_cast<int>(args.m), static_cast<int>(args.k),
                   &args.alpha, args.b, CUDA_R_32F, static_cast<int>(args.ldb),
                   args.a, CUDA_R_32F, static_cast<int>(args.lda), &args.beta,
                   args.c, CUDA_R_32F, static_cast<int>(args.ldc),
                   ComputeType(args.precision), CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

// Both operands bf16: cuBLAS's bf16 inputs with float32 accumulation. Both
// float32 as well (a weight given with its bf16 copy, against float32
// rows): the tensor cores' float32 path, which rounds as it goes, with no
// scratch. One bf16 only (bf16 rows against a float32 gradient), whichever
// takes less scratch: the float32 operand rounded to bf16 (to nearest even,
// as the CPU backend rounds it) and the product on two bf16 operands; or
// the bf16 operand widened (exactly) and the product on the tensor cores as
// with float32 inputs.
void CudaOps::Bf16OperandGemm(const GemmArgs& args) {
  if (args.a != nullptr && args.b != nullptr &&
      (args.a_bf16 == nullptr || args.b_bf16 == nullptr)) {
    GemmArgs float_args = args;
    float_args.a_bf16 = nullptr;
    float_args.b_bf16 = nullptr;
    float_args.precision = GemmPrecision::kBf16;
    return Gemm(float_args);
  }
  if (args.a_bf16 != nullptr && args.b_bf16 != nullptr) {
    CheckBlas(cublas_.gemm(blas_, BlasOperation(args.transpose_b),
                           BlasOperation(args.transpose_a),
                           static_cast<int>(args.n), static_cast<int>(args.m),
                           static_cast<int>(args.k), &args.alpha, args.b_bf16,
                           CUDA_R_16BF, static_cast<int>(args.ldb), args.a_bf16,
                           CUDA_R_16BF, static_cast<int>(args.lda), &args.beta,
                           args.c, CUDA_R_32F, static_cast<int>(args.ldc),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
    return;
  }
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
  const bool a_is_bf16 = args.a_bf16 != nullptr;
  const int64_t float32_elements = spanned(!a_is_bf16);
  const int64_t bf16_elements = spanned(a_is_bf16);
  GemmArgs converted = args;
  if (float32_elements * int64_t{sizeof(uint16_t)} <=
      bf16_elements * int64_t{sizeof(float)}) {
    char* scratch =
        Scratch(float32_elements * int64_t{sizeof(uint16_t)}, "Gemm");
    if (scratch == nullptr) return;
    uint16_t* rounded = At<uint16_t>(scratch, 0);
    if (!Check(LaunchCopyToBf16(float32_elements, a_is_bf16 ? args.b : args.a,
                                rounded, compute_stream_),
               "Gemm")) {
      return;
    }
    (a_is_bf16 ? converted.b_bf16 : converted.a_bf16) = rounded;
    return Bf16OperandGemm(converted);
  }
  char* scratch = Scratch(bf16_elements * int64_t{sizeof(float)}, "Gemm");
  if (scratch == nullptr) return;
  float* widened = At<float>(scratch, 0);
  if (!Check(
          LaunchWidenBf16(bf16_elements, a_is_bf16 ? args.a_bf16 : args.b_bf16,
                          widened, compute_stream_),
          "Gemm")) {
    return;
  }
  if (a_is_bf16) {
    converted.a_bf16 = nullptr;
    converted.a = widened;
  } else {
    converted.b_bf16 = nullptr;
    converted.b = widened;
  }
  converted.precision = GemmPrecision::kBf16;
  Gemm(converted);
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
      aligned ? ComputeType(GemmPrecision::kFloat32) : CUBLAS_COMPUTE_32F;
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
