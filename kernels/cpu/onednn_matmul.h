// bf16 matrix products on the CPU through oneDNN, which uses AMX or
// AVX-512 BF16 where the CPU has them and falls back where it has not:
// C (float32, m x n) = A (bf16, m x k, row-major) x B (bf16, k x n
// row-major, or n x k when transposed), the products accumulated in
// float32. Debian's OpenBLAS is built without its bf16 GEMM (cblas_sbgemm
// is declared but not exported), so oneDNN is the library here
// (docs/BENCHMARKS.md, "bf16 matrix products").
//
// A OneDnnMatmul is made once per shape (oneDNN compiles a kernel for it)
// and run many times; it is immutable and Run is thread-safe. oneDNN's
// exceptions stop here: every failure is a Status.
#ifndef PLATEAU_KERNELS_CPU_ONEDNN_MATMUL_H_
#define PLATEAU_KERNELS_CPU_ONEDNN_MATMUL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace plateau::kernels::cpu {

// bf16: the upper 16 bits of a float32, rounded to nearest even; NaN stays
// a (quiet) NaN.
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t value);
// REQUIRES: to.size() == from.size().
void ConvertToBf16(absl::Span<const float> from, absl::Span<uint16_t> to);

enum class MatmulInput { kBf16, kFloat32 };

class OneDnnMatmul {
 public:
  // INVALID_ARGUMENT for a non-positive size; UNIMPLEMENTED when oneDNN has
  // no kernel for it on this CPU. kFloat32 is oneDNN's float32 product, for
  // comparison.
  static absl::StatusOr<std::unique_ptr<OneDnnMatmul>> Create(
      int64_t m, int64_t k, int64_t n, bool b_transposed, MatmulInput input);
  ~OneDnnMatmul();

  // a, b: bf16 (uint16_t) or float32 elements as created; c: m x n floats.
  absl::Status Run(const void* a, const void* b, float* c) const;

  // The kernel oneDNN chose ("brg:avx512_core_amx_bf16", ...).
  const std::string& implementation() const { return implementation_; }

 private:
  struct State;
  explicit OneDnnMatmul(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
  std::string implementation_;
};

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_ONEDNN_MATMUL_H_
