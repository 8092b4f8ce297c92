// Matrix products on the CPU through oneDNN, which uses AMX or AVX-512 BF16
// for bf16 inputs where the CPU has them: C (float32, m x n, row-major) =
// alpha * A (m x k) . B (k x n) + beta * C, A and B each row-major or
// transposed (A stored k x m, B stored n x k), bf16 or float32 inputs, the
// products accumulated in float32. Debian's OpenBLAS is built without its
// bf16 GEMM (cblas_sbgemm is declared but not exported), so oneDNN is the
// library here (docs/BENCHMARKS.md, "bf16 mixed precision").
//
// A OneDnnMatmul is made once per (layout, input type, alpha, beta) with
// its sizes left to Run, so one compiled kernel serves every shape (an
// expert's rows change every step), and each matrix is read or written in
// place with its own leading dimension: only oneDNN's gemm-based kernels,
// which read the sizes and the leading dimensions when they run, are made. A
// row of c is the same bits whatever m is: oneDNN makes a one-row product (a
// matrix-vector one) in another order than the same row among others, so Run
// makes one row as two copies of it. It is immutable and Run is thread-safe.
// Run uses the calling thread's OpenMP thread count (SetOneDnnThreads).
// oneDNN's exceptions stop here: every failure is a Status. bf16 values are
// given as their bits (kernels/cpu/bf16.h).
#ifndef PLATEAU_KERNELS_CPU_ONEDNN_MATMUL_H_
#define PLATEAU_KERNELS_CPU_ONEDNN_MATMUL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace plateau::kernels::cpu {

enum class MatmulInput { kBf16, kFloat32 };

struct MatmulLayout {
  bool a_transposed = false;
  bool b_transposed = false;
  MatmulInput input = MatmulInput::kBf16;
  float alpha = 1.0f;
  float beta = 0.0f;
};

class OneDnnMatmul {
 public:
  // UNIMPLEMENTED when oneDNN cannot make the kernel, or only one that is
  // not gemm-based (its slow reference code, on a CPU without the
  // instructions).
  static absl::StatusOr<std::unique_ptr<OneDnnMatmul>> Create(
      const MatmulLayout& layout);
  ~OneDnnMatmul();

  // a, b: bf16 (uint16_t) or float32 elements as created, with leading
  // dimensions (elements from one stored row to the next) lda, ldb and ldc.
  // INVALID_ARGUMENT for a non-positive size, or a leading dimension shorter
  // than its stored row (a: k, or m when transposed; b: n, or k when
  // transposed; c: n).
  absl::Status Run(int64_t m, int64_t k, int64_t n, const void* a, int64_t lda,
                   const void* b, int64_t ldb, float* c, int64_t ldc) const;
  // Dense matrices.
  absl::Status Run(int64_t m, int64_t k, int64_t n, const void* a,
                   const void* b, float* c) const;

  // The kernel oneDNN chose ("gemm:jit", ...).
  const std::string& implementation() const { return implementation_; }

 private:
  struct State;
  explicit OneDnnMatmul(std::unique_ptr<State> state);

  // Run for sizes already checked: oneDNN's kernel, and m == 1 through it
  // as two copies of the row.
  absl::Status Execute(int64_t m, int64_t k, int64_t n, const void* a,
                       int64_t lda, const void* b, int64_t ldb, float* c,
                       int64_t ldc) const;
  absl::Status RunOneRow(int64_t k, int64_t n, const void* a, int64_t lda,
                         const void* b, int64_t ldb, float* c) const;

  std::unique_ptr<State> state_;
  std::string implementation_;
};

// The most oneDNN's kernels may use here ("avx2", "avx512_core_amx", ...):
// the CPU's, lowered with the SIMD level (PLATEAU_SIMD, simd.h) or by
// DNNL_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA, which then take precedence.
std::string OneDnnIsa();

// The OpenMP threads oneDNN uses for calls made from this thread.
void SetOneDnnThreads(int threads);

// SetOneDnnThreads(1), once per thread: for kernels run, and made, on the
// calling thread alone (CpuOps splits work over its own pool).
void UseOneOneDnnThread();

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_ONEDNN_MATMUL_H_
