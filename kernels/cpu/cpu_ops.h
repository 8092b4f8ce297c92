// The CPU backend of kernels/ops.h: OpenBLAS (single-threaded per call) for
// float32 matrix products, oneDNN for bf16 ones (GemmPrecision::kBf16: the
// operands converted to bf16 in the scratch arena, then one oneDNN call per
// piece, also single-threaded; where oneDNN has no bf16 kernel for this CPU,
// the bf16-rounded operands go through our fixed-order kernel instead:
// fixed_order_gemm.h), AVX-512/AVX2 loops (chosen at run time) for the rest,
// and one ThreadPool that splits every op statically. Results are bitwise the
// same for any thread count: products are cut into pieces by their size
// (PiecesOfProduct), never by the threads, and sums over rows are taken in
// fixed chunks or partials. The methods are implemented by
// family in gemm.cc, elementwise.cc, normalization.cc, attention.cc, moe.cc
// and cross_entropy.cc; bf16 products in gemm_bf16.cc. Attention's float32
// block products go through oneDNN instead of OpenBLAS where OpenBLAS's
// kernels are narrower than the CPU's vectors (AttentionBlocksThroughOneDnn).
//
// Thread safety: unlike the Ops default, every method may be called from
// several threads at once, as long as no call writes a buffer another call
// reads or writes. Calls that split across the pool take it one at a time
// (ThreadPool serializes them); calls too small to split run on the calling
// thread. Either way each call gives bitwise the result it would alone.
// bf16 products take the scratch arena one call at a time.
//
// Errors: a bf16 product whose operand copies the scratch arena cannot hold
// (RESOURCE_EXHAUSTED, a full device pool) is recorded in status() and
// leaves its output unwritten; nothing else fails.
#ifndef PLATEAU_KERNELS_CPU_CPU_OPS_H_
#define PLATEAU_KERNELS_CPU_CPU_OPS_H_

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/scratch_arena.h"

namespace plateau::kernels::cpu {

// Queries (and keys) per block of the attention kernels: their working
// memory is a few blocks x blocks of floats per thread.
inline constexpr int64_t kAttentionBlockTokens = 128;

// Plain heap memory as a scratch arena, for CpuOps made outside a Backend
// (tests, benchmarks): unaccounted, unlike the Backend's.
class HeapScratchArena final : public ScratchArena {
 public:
  absl::StatusOr<void*> Reserve(int64_t bytes) override;

 private:
  std::vector<char> block_;
};

class CpuOps final : public Ops {
 public:
  // FAILED_PRECONDITION, with the reason, when OpenBLAS cannot be loaded
  // (blas.h). REQUIRES: threads >= 1.
  static absl::StatusOr<std::unique_ptr<CpuOps>> Create(int threads);

  // REQUIRES: threads >= 1; `scratch` outlives the ops (null: a
  // HeapScratchArena of their own). Loads OpenBLAS; without it, the process
  // ends with the reason (BlasFatalError). Create reports that as a Status.
  explicit CpuOps(int threads, ScratchArena* scratch = nullptr);

  // Whether attention's block products run through oneDNN's float32 kernels:
  // where the CPU (at DetectedSimdLevel) has AVX-512 but OpenBLAS runs
  // narrower kernels (an OPENBLAS_CORETYPE set below the CPU, as machines
  // whose OpenBLAS AVX-512 kernels are unsafe set it), oneDNN's are 1.6x
  // faster on attention's blocks; where OpenBLAS's are AVX-512 ones, they
  // are the faster (docs/BENCHMARKS.md, "Attention's blocks where OpenBLAS
  // is held to AVX2"). Fixed for the process, so results do not change
  // between a run and its resume.
  static bool AttentionBlocksThroughOneDnn();

  // What runs bf16 products on this CPU, for logs: oneDNN's kernel
  // ("oneDNN gemm:jit"), or the fixed-order kernel at its SIMD level
  // ("fixed-order avx2") where oneDNN has no gemm-based bf16 kernel here
  // (as Matmul is then null).
  static std::string Bf16ProductsKernel();

  // oneDNN's kernel for `layout`, made on first use and kept (thread-safe);
  // null where oneDNN has no gemm-based one for this CPU
  // (OneDnnMatmul::Create).
  const OneDnnMatmul* Matmul(const MatmulLayout& layout);

  const char* name() const override { return "cpu"; }
  absl::Status status() const override;
  int threads() const { return pool_.threads(); }

  void Gemm(const GemmArgs& args) override;
  void GroupedGemm(absl::Span<const GemmArgs> problems) override;
  void SetMatmulStagingBytes(int64_t bytes) override;

  void CopyFromHost(int64_t bytes, const void* host, void* device) override;
  void CopyToHost(int64_t bytes, const void* device, void* host) override;

  void Fill(int64_t count, float value, float* x) override;
  void CopyToBf16(int64_t count, const float* x, uint16_t* out) override;
  void CopyMatrixToBf16(int64_t rows, int64_t columns, const float* x,
                        int64_t x_stride, uint16_t* out,
                        int64_t out_stride) override;
  void CopyFromBf16(int64_t count, const uint16_t* x, float* out) override;
  void Copy(int64_t count, const float* source, float* destination) override;
  void CopyBf16(int64_t count, const uint16_t* source,
                uint16_t* destination) override;
  void Add(int64_t count, const float* a, const float* b, float* out) override;
  void Scale(int64_t count, float factor, float* x) override;
  double SumOfSquares(int64_t count, const float* x) override;
  double Sum(int64_t count, const float* x) override;
  void ColumnSums(int64_t rows, int64_t columns, const float* x,
                  absl::Span<double> column_sums) override;

  void EmbeddingForward(int64_t tokens, int64_t dim, const int32_t* ids,
                        const float* table, float* out) override;
  void EmbeddingBackward(int64_t tokens, int64_t dim, const int32_t* ids,
                         const float* dout, float* dtable) override;
  void EmbeddingForwardBf16(int64_t tokens, int64_t dim, const int32_t* ids,
                            const uint16_t* table, uint16_t* out) override;
  void EmbeddingBackwardFromBf16(int64_t tokens, int64_t dim,
                                 const int32_t* ids, const uint16_t* dout,
                                 float* dtable) override;
  void EmbeddingBackwardBf16(int64_t tokens, int64_t dim, const int32_t* ids,
                             const uint16_t* dout, uint16_t* dtable) override;

  void RmsNormForward(int64_t rows, int64_t dim, const float* x,
                      const float* weight, float epsilon, float* out,
                      float* inverse_rms) override;
  void RmsNormForwardToBf16(int64_t rows, int64_t dim, const float* x,
                            const float* weight, float epsilon, uint16_t* out,
                            float* inverse_rms) override;
  void RmsNormForwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                          const float* weight, float epsilon, uint16_t* out,
                          float* inverse_rms) override;
  void RmsNormBackward(int64_t rows, int64_t dim, const float* x,
                       const float* weight, const float* inverse_rms,
                       const float* dout, float* dx, float* dweight) override;
  void RmsNormBackwardToBf16(int64_t rows, int64_t dim, const float* x,
                             const float* weight, const float* inverse_rms,
                             const float* dout, uint16_t* dx,
                             float* dweight) override;
  void RmsNormBackwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                           const float* weight, const float* inverse_rms,
                           const float* dout, uint16_t* dx,
                           float* dweight) override;

  void HeadRmsNormForward(int64_t rows, int64_t heads, int64_t head_dim,
                          int64_t row_stride, const float* weight,
                          float epsilon, float* x) override;
  void HeadRmsNormBackward(int64_t rows, int64_t heads, int64_t head_dim,
                           const float* x, int64_t x_stride,
                           const float* weight, float epsilon,
                           int64_t row_stride, float* dx,
                           float* dweight) override;
  void RotaryForward(int64_t rows, int64_t first_row, int64_t seq_len,
                     int64_t heads, int64_t head_dim, int64_t row_stride,
                     double theta, float* x) override;
  void RotaryBackward(int64_t rows, int64_t first_row, int64_t seq_len,
                      int64_t heads, int64_t head_dim, int64_t row_stride,
                      double theta, float* dx) override;

  void AttentionForward(const AttentionShape& shape, const float* q,
                        const float* k, const float* v, int64_t qkv_stride,
                        float* out, int64_t out_stride,
                        float* logsumexp) override;
  void AttentionBackward(const AttentionShape& shape, const float* q,
                         const float* k, const float* v, int64_t qkv_stride,
                         const float* out, const float* dout,
                         int64_t out_stride, const float* logsumexp, float* dq,
                         float* dk, float* dv) override;
  void AttentionForwardBf16(const AttentionShape& shape, const uint16_t* q,
                            const uint16_t* k, const uint16_t* v,
                            int64_t qkv_stride, uint16_t* out,
                            int64_t out_stride, float* logsumexp) override;
  void AttentionBackwardBf16(const AttentionShape& shape, const uint16_t* q,
                             const uint16_t* k, const uint16_t* v,
                             int64_t qkv_stride, const uint16_t* out,
                             const float* dout, int64_t out_stride,
                             const float* logsumexp, float* dq, float* dk,
                             float* dv) override;

  void SwiGluForward(int64_t count, const float* gate, const float* up,
                     float* out) override;
  void SwiGluForwardToBf16(int64_t count, const float* gate, const float* up,
                           uint16_t* out) override;
  void SwiGluBackward(int64_t count, const float* gate, const float* up,
                      const float* dout, float* dgate, float* dup) override;
  void SwiGluForwardBf16(int64_t count, const uint16_t* gate,
                         const uint16_t* up, uint16_t* out) override;
  void SwiGluBackwardBf16(int64_t count, const uint16_t* gate,
                          const uint16_t* up, const float* dout,
                          uint16_t* dgate, uint16_t* dup) override;

  void RouterForward(const RouterShape& shape, const float* logits,
                     const float* expert_bias, float* probs,
                     int32_t* expert_index, float* gates, float* logsumexp,
                     float* score_sums) override;
  void RouterBackward(const RouterShape& shape, const float* probs,
                      const int32_t* expert_index, const float* gates,
                      const float* dgates,
                      absl::Span<const float> dprobs_per_expert,
                      const float* logsumexp, float z_loss_scale,
                      const float* score_sums, float* dlogits) override;

  void ComputeExpertLayout(int64_t tokens, int64_t experts, int64_t top_k,
                           const int32_t* expert_index, int32_t* assignment_row,
                           int32_t* row_token,
                           absl::Span<int64_t> expert_offsets) override;
  void GatherRows(int64_t rows, int64_t dim, const float* x,
                  const int32_t* row_token, float* out) override;
  void GatherRowsBf16(int64_t rows, int64_t dim, const uint16_t* x,
                      const int32_t* row_token, uint16_t* out) override;
  void GatherRmsNormedRows(int64_t rows, int64_t dim, const float* x,
                           const float* inverse_rms, const float* weight,
                           const int32_t* row_token, float* out) override;
  void GatherRmsNormedRowsToBf16(int64_t rows, int64_t dim, const float* x,
                                 const float* inverse_rms, const float* weight,
                                 const int32_t* row_token,
                                 uint16_t* out) override;
  void GatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                          const float* drows, const int32_t* assignment_row,
                          float* dx) override;
  void GatherRowsBackwardBf16(int64_t tokens, int64_t top_k, int64_t dim,
                              const uint16_t* drows,
                              const int32_t* assignment_row,
                              float* dx) override;
  void CombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                   const float* rows, const int32_t* assignment_row,
                   const float* gates, const float* residual,
                   float* out) override;
  void CombineRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                           const float* rows, const int32_t* assignment_row,
                           const float* gates, const float* dout, float* drows,
                           float* dgates) override;
  void CombineRowsBf16(int64_t tokens, int64_t top_k, int64_t dim,
                       const uint16_t* rows, const int32_t* assignment_row,
                       const float* gates, const float* residual,
                       float* out) override;
  void CombineRowsBackwardBf16(int64_t tokens, int64_t top_k, int64_t dim,
                               const uint16_t* rows,
                               const int32_t* assignment_row,
                               const float* gates, const uint16_t* dout,
                               uint16_t* drows, float* dgates) override;

  void CrossEntropyForward(int64_t tokens, int64_t vocab, const float* logits,
                           const int32_t* targets, float* losses,
                           float* logsumexp) override;
  void CrossEntropyFoldBlock(int64_t tokens, int64_t block, int64_t vocab_begin,
                             const float* logits, const int32_t* targets,
                             float* logsumexp, float* target_logits) override;
  void CrossEntropyBackward(int64_t tokens, int64_t block, int64_t vocab_begin,
                            const int32_t* targets, const float* logsumexp,
                            float scale, float* logits) override;
  void CrossEntropyForwardBf16(int64_t tokens, int64_t vocab,
                               const uint16_t* logits, const int32_t* targets,
                               float* losses, float* logsumexp) override;
  void CrossEntropyFoldBlockBf16(int64_t tokens, int64_t block,
                                 int64_t vocab_begin, const uint16_t* logits,
                                 const int32_t* targets, float* logsumexp,
                                 float* target_logits) override;
  void CrossEntropyBackwardBf16(int64_t tokens, int64_t block,
                                int64_t vocab_begin, const int32_t* targets,
                                const float* logsumexp, float scale,
                                uint16_t* logits) override;

  void AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                   float* params, const float* grads, float* first_moment,
                   float* second_moment) override;
  void AccumulateSquares(absl::Span<const TieredSlice> slices) override;
  void SquareRoots(int64_t count, float scale, const float* x,
                   float* out) override;
  void TieredMeasure(const TieredCoefficients& coefficients,
                     absl::Span<const TieredSlice> slices,
                     absl::Span<double> sums) override;
  void TieredApply(const TieredCoefficients& coefficients,
                   absl::Span<const TieredSlice> slices) override;
  void TieredUpdate(const TieredCoefficients& coefficients,
                    absl::Span<const TieredSlice> slices,
                    float clip_threshold) override;
  void LionUpdate(const TieredCoefficients& coefficients,
                  absl::Span<const TieredSlice> slices) override;

 private:
  // Calls body(slice) for every slice, each on one thread, the threads
  // taking runs of slices of about equal elements.
  template <typename Body>
  void RunOverWholeSlices(absl::Span<const TieredSlice> slices, Body body);

  // The products of `problems`, all bf16 ones (IsBf16Product; gemm_bf16.cc).
  void Bf16Products(absl::Span<const GemmArgs> problems);
  void RecordError(absl::Status error);

  ThreadPool pool_;
  std::unique_ptr<HeapScratchArena> own_scratch_;
  ScratchArena* scratch_;
  // Held for the whole of a bf16 product: the arena is not thread-safe.
  absl::Mutex bf16_mutex_;
  int64_t staging_bytes_ ABSL_GUARDED_BY(bf16_mutex_) =
      kDefaultMatmulStagingBytes;
  absl::Mutex matmuls_mutex_;
  std::map<std::tuple<MatmulInput, bool, bool, float, float>,
           std::unique_ptr<OneDnnMatmul>>
      matmuls_ ABSL_GUARDED_BY(matmuls_mutex_);
  mutable absl::Mutex error_mutex_;
  absl::Status first_error_ ABSL_GUARDED_BY(error_mutex_);
};

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_CPU_OPS_H_
