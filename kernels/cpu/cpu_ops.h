// The CPU backend of kernels/ops.h: OpenBLAS (single-threaded per call) for
// matrix products, AVX-512/AVX2 loops (chosen at run time) for the rest, and
// one ThreadPool that splits every op statically, so results are bitwise
// reproducible for a given thread count. The methods are implemented by
// family in gemm.cc, elementwise.cc, normalization.cc, attention.cc, moe.cc
// and cross_entropy.cc.
//
// Thread safety: unlike the Ops default, every method may be called from
// several threads at once, as long as no call writes a buffer another call
// reads or writes. Calls that split across the pool take it one at a time
// (ThreadPool serializes them); calls too small to split run on the calling
// thread. Either way each call gives bitwise the result it would alone.
#ifndef PLATEAU_KERNELS_CPU_CPU_OPS_H_
#define PLATEAU_KERNELS_CPU_CPU_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops.h"

namespace plateau::kernels::cpu {

// Queries (and keys) per block of the attention kernels: their working
// memory is a few blocks x blocks of floats per thread.
inline constexpr int64_t kAttentionBlockTokens = 128;

class CpuOps final : public Ops {
 public:
  // FAILED_PRECONDITION, with the reason, when OpenBLAS cannot be loaded
  // (blas.h). REQUIRES: threads >= 1.
  static absl::StatusOr<std::unique_ptr<CpuOps>> Create(int threads);

  // REQUIRES: threads >= 1. Loads OpenBLAS; without it, the process ends
  // with the reason (BlasFatalError). Create reports that as a Status.
  explicit CpuOps(int threads);

  const char* name() const override { return "cpu"; }
  int threads() const { return pool_.threads(); }

  void Gemm(const GemmArgs& args) override;
  void GroupedGemm(absl::Span<const GemmArgs> problems) override;

  void CopyFromHost(int64_t bytes, const void* host, void* device) override;
  void CopyToHost(int64_t bytes, const void* device, void* host) override;

  void Fill(int64_t count, float value, float* x) override;
  void Copy(int64_t count, const float* source, float* destination) override;
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

  void RmsNormForward(int64_t rows, int64_t dim, const float* x,
                      const float* weight, float epsilon, float* out,
                      float* inverse_rms) override;
  void RmsNormBackward(int64_t rows, int64_t dim, const float* x,
                       const float* weight, const float* inverse_rms,
                       const float* dout, float* dx, float* dweight) override;

  void RotaryForward(int64_t rows, int64_t seq_len, int64_t heads,
                     int64_t head_dim, int64_t row_stride, float* x) override;
  void RotaryBackward(int64_t rows, int64_t seq_len, int64_t heads,
                      int64_t head_dim, int64_t row_stride, float* dx) override;

  void AttentionForward(const AttentionShape& shape, const float* q,
                        const float* k, const float* v, int64_t qkv_stride,
                        float* out, int64_t out_stride,
                        float* logsumexp) override;
  void AttentionBackward(const AttentionShape& shape, const float* q,
                         const float* k, const float* v, int64_t qkv_stride,
                         const float* out, const float* dout,
                         int64_t out_stride, const float* logsumexp, float* dq,
                         float* dk, float* dv) override;

  void SwiGluForward(int64_t count, const float* gate, const float* up,
                     float* out) override;
  void SwiGluBackward(int64_t count, const float* gate, const float* up,
                      const float* dout, float* dgate, float* dup) override;

  void RouterForward(int64_t tokens, int64_t experts, int64_t top_k,
                     const float* logits, float* probs, int32_t* expert_index,
                     float* gates) override;
  void RouterBackward(int64_t tokens, int64_t experts, int64_t top_k,
                      const float* probs, const int32_t* expert_index,
                      const float* gates, const float* dgates,
                      absl::Span<const float> dprobs_per_expert,
                      float* dlogits) override;

  void ComputeExpertLayout(int64_t tokens, int64_t experts, int64_t top_k,
                           const int32_t* expert_index, int32_t* assignment_row,
                           int32_t* row_token,
                           absl::Span<int64_t> expert_offsets) override;
  void GatherRows(int64_t rows, int64_t dim, const float* x,
                  const int32_t* row_token, float* out) override;
  void GatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                          const float* drows, const int32_t* assignment_row,
                          float* dx) override;
  void CombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                   const float* rows, const int32_t* assignment_row,
                   const float* gates, const float* residual,
                   float* out) override;
  void CombineRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                           const float* rows, const int32_t* assignment_row,
                           const float* gates, const float* dout, float* drows,
                           float* dgates) override;

  void CrossEntropyForward(int64_t tokens, int64_t vocab, const float* logits,
                           const int32_t* targets, float* losses,
                           float* logsumexp) override;
  void CrossEntropyFoldBlock(int64_t tokens, int64_t block, int64_t vocab_begin,
                             const float* logits, const int32_t* targets,
                             float* logsumexp, float* target_logits) override;
  void CrossEntropyBackward(int64_t tokens, int64_t block, int64_t vocab_begin,
                            const int32_t* targets, const float* logsumexp,
                            float scale, float* logits) override;

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

  ThreadPool pool_;
};

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_CPU_OPS_H_
