// The launchers of Plateau's CUDA kernels (kernels/cuda/*.cu), one per
// kernel or per short sequence of kernels, for CudaOps. Pointers are device
// memory unless named host_; each launcher enqueues on `stream` and returns
// the launch's error (cudaGetLastError), never waiting for the work. The
// formulas are those of kernels/ops.h; each .cu file says how the work is
// split. Scratch buffers are the caller's, sized by
// kernels/cuda/launch_geometry.h. Plain types only, so that nvcc sees no
// abseil.
#ifndef PLATEAU_KERNELS_CUDA_KERNELS_H_
#define PLATEAU_KERNELS_CUDA_KERNELS_H_

#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/launch_geometry.h"
#include "kernels/tiered_update.h"

namespace plateau::kernels::cuda {

// ---- elementwise.cu ----
cudaError_t LaunchFill(int64_t count, float value, float* x,
                       cudaStream_t stream);
cudaError_t LaunchAdd(int64_t count, const float* a, const float* b, float* out,
                      cudaStream_t stream);
cudaError_t LaunchScale(int64_t count, float factor, float* x,
                        cudaStream_t stream);
cudaError_t LaunchSquareRoots(int64_t count, float scale, const float* x,
                              float* out, cudaStream_t stream);
cudaError_t LaunchSwiGluForward(int64_t count, const float* gate,
                                const float* up, float* out,
                                cudaStream_t stream);
cudaError_t LaunchSwiGluForwardToBf16(int64_t count, const float* gate,
                                      const float* up, uint16_t* out,
                                      cudaStream_t stream);
// out[i] = x[i] rounded to bf16 (to nearest even).
cudaError_t LaunchCopyToBf16(int64_t count, const float* x, uint16_t* out,
                             cudaStream_t stream);
// The [rows, columns] matrix at x (row stride x_stride) rounded likewise
// into out (row stride out_stride).
cudaError_t LaunchCopyMatrixToBf16(int64_t rows, int64_t columns,
                                   const float* x, int64_t x_stride,
                                   uint16_t* out, int64_t out_stride,
                                   cudaStream_t stream);
// out[i] = x[i] as float32 (exact).
cudaError_t LaunchWidenBf16(int64_t count, const uint16_t* x, float* out,
                            cudaStream_t stream);
cudaError_t LaunchSwiGluBackward(int64_t count, const float* gate,
                                 const float* up, const float* dout,
                                 float* dgate, float* dup, cudaStream_t stream);
// The same two over bf16 gate and up: the same float32 math on their values,
// the backward's dgate and dup rounded to bf16.
cudaError_t LaunchSwiGluForwardBf16(int64_t count, const uint16_t* gate,
                                    const uint16_t* up, uint16_t* out,
                                    cudaStream_t stream);
cudaError_t LaunchSwiGluBackward(int64_t count, const uint16_t* gate,
                                 const uint16_t* up, const float* dout,
                                 uint16_t* dgate, uint16_t* dup,
                                 cudaStream_t stream);
cudaError_t LaunchAdamWUpdate(const AdamWCoefficients& coefficients,
                              int64_t count, float* params, const float* grads,
                              float* first_moment, float* second_moment,
                              cudaStream_t stream);

// ---- reduction.cu ----
// *out = sum of x[i] (or of x[i]^2) in float64. partials:
// ReductionBlocks(count).
cudaError_t LaunchSum(int64_t count, const float* x, bool squares,
                      double* partials, double* out, cudaStream_t stream);
// sums[j] = sum_i x[i, j] in float64. partials: RowParts(rows).parts x columns.
cudaError_t LaunchColumnSums(int64_t rows, int64_t columns, const float* x,
                             double* partials, double* sums,
                             cudaStream_t stream);

// ---- sort.cu ----
// A stable sort of int32 keys in [0, 2^key_bits) carrying their positions:
// sorted_keys[r] and sorted_positions[r] are the key and the index (in
// `keys`) of the r-th item, equal keys in index order. scratch:
// SortScratchInts(items) int32s. Returns where the sorted keys and positions
// are (inside scratch).
struct SortedItems {
  const int32_t* keys = nullptr;
  const int32_t* positions = nullptr;
};
cudaError_t LaunchStableSortByKey(int64_t items, const int32_t* keys,
                                  int key_bits, int32_t* scratch,
                                  SortedItems* sorted, cudaStream_t stream);

// ---- embedding.cu ----
cudaError_t LaunchEmbeddingForward(int64_t tokens, int64_t dim,
                                   const int32_t* ids, const float* table,
                                   float* out, cudaStream_t stream);
// dtable[ids[t]] += dout[t], tokens of one id added in token order. scratch:
// SortScratchInts(tokens) int32s.
cudaError_t LaunchEmbeddingBackward(int64_t tokens, int64_t dim,
                                    const int32_t* ids, const float* dout,
                                    float* dtable, int32_t* scratch,
                                    cudaStream_t stream);
// The same backward of a bf16 dout, widened.
cudaError_t LaunchEmbeddingBackwardFromBf16(int64_t tokens, int64_t dim,
                                            const int32_t* ids,
                                            const uint16_t* dout, float* dtable,
                                            int32_t* scratch,
                                            cudaStream_t stream);
// The same two over a bf16 table: forward gathers its rows as they are;
// backward sums each row in float32 from its widened value and the widened
// bf16 dout, and rounds once.
cudaError_t LaunchEmbeddingForwardBf16(int64_t tokens, int64_t dim,
                                       const int32_t* ids,
                                       const uint16_t* table, uint16_t* out,
                                       cudaStream_t stream);
cudaError_t LaunchEmbeddingBackwardBf16(int64_t tokens, int64_t dim,
                                        const int32_t* ids,
                                        const uint16_t* dout, uint16_t* dtable,
                                        int32_t* scratch, cudaStream_t stream);

// ---- normalization.cu ----
cudaError_t LaunchRmsNormForward(int64_t rows, int64_t dim, const float* x,
                                 const float* weight, float epsilon, float* out,
                                 float* inverse_rms, cudaStream_t stream);
cudaError_t LaunchRmsNormForwardToBf16(int64_t rows, int64_t dim,
                                       const float* x, const float* weight,
                                       float epsilon, uint16_t* out,
                                       float* inverse_rms, cudaStream_t stream);
// The same of a bf16 x, widened as it is read.
cudaError_t LaunchRmsNormForwardBf16(int64_t rows, int64_t dim,
                                     const uint16_t* x, const float* weight,
                                     float epsilon, uint16_t* out,
                                     float* inverse_rms, cudaStream_t stream);
// partials: RowParts(rows).parts x dim floats.
cudaError_t LaunchRmsNormBackward(int64_t rows, int64_t dim, const float* x,
                                  const float* weight, const float* inverse_rms,
                                  const float* dout, float* dx, float* dweight,
                                  float* partials, cudaStream_t stream);
// The same into a bf16 dx: widened, the same sum, rounded once.
cudaError_t LaunchRmsNormBackward(int64_t rows, int64_t dim, const float* x,
                                  const float* weight, const float* inverse_rms,
                                  const float* dout, uint16_t* dx,
                                  float* dweight, float* partials,
                                  cudaStream_t stream);
// The same of a bf16 x, widened as it is read.
cudaError_t LaunchRmsNormBackward(int64_t rows, int64_t dim, const uint16_t* x,
                                  const float* weight, const float* inverse_rms,
                                  const float* dout, uint16_t* dx,
                                  float* dweight, float* partials,
                                  cudaStream_t stream);
cudaError_t LaunchHeadRmsNormForward(int64_t rows, int64_t heads,
                                     int64_t head_dim, int64_t row_stride,
                                     const float* weight, float epsilon,
                                     float* x, cudaStream_t stream);
// scratch: rows * heads + RowPartsOf(rows).parts * head_dim floats.
cudaError_t LaunchHeadRmsNormBackward(int64_t rows, int64_t heads,
                                      int64_t head_dim, const float* x,
                                      int64_t x_stride, const float* weight,
                                      float epsilon, int64_t row_stride,
                                      float* dx, float* dweight, float* scratch,
                                      cudaStream_t stream);
// sign +1: forward rotation; -1: its inverse (the backward pass).
cudaError_t LaunchRotary(int64_t rows, int64_t first_row, int64_t seq_len,
                         int64_t heads, int64_t head_dim, int64_t row_stride,
                         double theta, float sign, float* x,
                         cudaStream_t stream);

// ---- attention.cu ----
// REQUIRES: head_dim <= kMaxAttentionHeadDim (launch_geometry.h).
// kv_heads divides heads (kernels::AttentionShape).
struct AttentionDims {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // AttentionShape's logsumexp_heads() and the backward's dq, dk and dv
  // row stride.
  int64_t logsumexp_heads = 0;
  int64_t gradient_stride = 0;
};
cudaError_t LaunchAttentionForward(const AttentionDims& dims, const float* q,
                                   const float* k, const float* v,
                                   int64_t qkv_stride, float* out,
                                   int64_t out_stride, float* logsumexp,
                                   cudaStream_t stream);
// q, k, v and out as bf16: the same float32 math on their values.
cudaError_t LaunchAttentionForward(const AttentionDims& dims, const uint16_t* q,
                                   const uint16_t* k, const uint16_t* v,
                                   int64_t qkv_stride, uint16_t* out,
                                   int64_t out_stride, float* logsumexp,
                                   cudaStream_t stream);
// delta: batch x heads x seq_len floats of scratch.
cudaError_t LaunchAttentionBackward(const AttentionDims& dims, const float* q,
                                    const float* k, const float* v,
                                    int64_t qkv_stride, const float* out,
                                    const float* dout, int64_t out_stride,
                                    const float* logsumexp, float* dq,
                                    float* dk, float* dv, float* delta,
                                    cudaStream_t stream);
cudaError_t LaunchAttentionBackward(const AttentionDims& dims,
                                    const uint16_t* q, const uint16_t* k,
                                    const uint16_t* v, int64_t qkv_stride,
                                    const uint16_t* out, const float* dout,
                                    int64_t out_stride, const float* logsumexp,
                                    float* dq, float* dk, float* dv,
                                    float* delta, cudaStream_t stream);

// ---- moe.cu ----
// kernels::Ops::RouterForward and RouterBackward; sigmoid: RouterScore
// kSigmoid. expert_bias and dprobs_per_expert: `experts` floats, or null for
// none; logsumexp and score_sums: `tokens` floats, or null for none.
cudaError_t LaunchRouterForward(int64_t tokens, int64_t experts, int64_t top_k,
                                bool sigmoid, const float* logits,
                                const float* expert_bias, float* probs,
                                int32_t* expert_index, float* gates,
                                float* logsumexp, float* score_sums,
                                cudaStream_t stream);
cudaError_t LaunchRouterBackward(int64_t tokens, int64_t experts, int64_t top_k,
                                 bool sigmoid, const float* probs,
                                 const int32_t* expert_index,
                                 const float* gates, const float* dgates,
                                 const float* dprobs_per_expert,
                                 const float* logsumexp, float z_loss_scale,
                                 const float* score_sums, float* dlogits,
                                 cudaStream_t stream);
// assignment_row and row_token of ops.h from the stably sorted assignments;
// offsets: experts + 1 int64s.
cudaError_t LaunchExpertLayout(int64_t assignments, int64_t experts,
                               int64_t top_k, const SortedItems& sorted,
                               int32_t* assignment_row, int32_t* row_token,
                               int64_t* offsets, cudaStream_t stream);
cudaError_t LaunchGatherRows(int64_t rows, int64_t dim, const float* x,
                             const int32_t* row_token, float* out,
                             cudaStream_t stream);
cudaError_t LaunchGatherRows(int64_t rows, int64_t dim, const uint16_t* x,
                             const int32_t* row_token, uint16_t* out,
                             cudaStream_t stream);
cudaError_t LaunchGatherRmsNormedRows(int64_t rows, int64_t dim, const float* x,
                                      const float* inverse_rms,
                                      const float* weight,
                                      const int32_t* row_token, float* out,
                                      cudaStream_t stream);
cudaError_t LaunchGatherRmsNormedRowsToBf16(int64_t rows, int64_t dim,
                                            const float* x,
                                            const float* inverse_rms,
                                            const float* weight,
                                            const int32_t* row_token,
                                            uint16_t* out, cudaStream_t stream);
cudaError_t LaunchGatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                     const float* drows,
                                     const int32_t* assignment_row, float* dx,
                                     cudaStream_t stream);
cudaError_t LaunchGatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                     const uint16_t* drows,
                                     const int32_t* assignment_row, float* dx,
                                     cudaStream_t stream);
cudaError_t LaunchCombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                              const float* rows, const int32_t* assignment_row,
                              const float* gates, const float* residual,
                              float* out, cudaStream_t stream);
cudaError_t LaunchCombineRowsBackward(int64_t tokens, int64_t top_k,
                                      int64_t dim, const float* rows,
                                      const int32_t* assignment_row,
                                      const float* gates, const float* dout,
                                      float* drows, float* dgates,
                                      cudaStream_t stream);
// The same two over bf16 rows: the same float32 math on their values, the
// backward's drows rounded to bf16 and its dout bf16 too, widened.
cudaError_t LaunchCombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                              const uint16_t* rows,
                              const int32_t* assignment_row, const float* gates,
                              const float* residual, float* out,
                              cudaStream_t stream);
cudaError_t LaunchCombineRowsBackward(int64_t tokens, int64_t top_k,
                                      int64_t dim, const uint16_t* rows,
                                      const int32_t* assignment_row,
                                      const float* gates, const uint16_t* dout,
                                      uint16_t* drows, float* dgates,
                                      cudaStream_t stream);

// ---- cross_entropy.cu ----
cudaError_t LaunchCrossEntropyForward(int64_t tokens, int64_t vocab,
                                      const float* logits,
                                      const int32_t* targets, float* losses,
                                      float* logsumexp, cudaStream_t stream);
cudaError_t LaunchCrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                        int64_t vocab_begin,
                                        const float* logits,
                                        const int32_t* targets,
                                        float* logsumexp, float* target_logits,
                                        cudaStream_t stream);
cudaError_t LaunchCrossEntropyBackward(int64_t tokens, int64_t block,
                                       int64_t vocab_begin,
                                       const int32_t* targets,
                                       const float* logsumexp, float scale,
                                       float* logits, cudaStream_t stream);
cudaError_t LaunchCrossEntropyForwardBf16(int64_t tokens, int64_t vocab,
                                          const uint16_t* logits,
                                          const int32_t* targets, float* losses,
                                          float* logsumexp,
                                          cudaStream_t stream);
cudaError_t LaunchCrossEntropyFoldBlockBf16(
    int64_t tokens, int64_t block, int64_t vocab_begin, const uint16_t* logits,
    const int32_t* targets, float* logsumexp, float* target_logits,
    cudaStream_t stream);
cudaError_t LaunchCrossEntropyBackwardBf16(
    int64_t tokens, int64_t block, int64_t vocab_begin, const int32_t* targets,
    const float* logsumexp, float scale, uint16_t* logits, cudaStream_t stream);

// ---- tiered_update.cu ----
// piece_sums[p]: the sum of u^2 over piece p.
cudaError_t LaunchTieredMeasure(const TieredCoefficients& coefficients,
                                const TieredSlice* slices,
                                const SlicePiece* pieces, int64_t piece_count,
                                double* piece_sums, cudaStream_t stream);
cudaError_t LaunchTieredApply(const TieredCoefficients& coefficients,
                              const TieredSlice* slices,
                              const SlicePiece* pieces, int64_t piece_count,
                              cudaStream_t stream);
cudaError_t LaunchLionUpdate(const TieredCoefficients& coefficients,
                             const TieredSlice* slices,
                             const SlicePiece* pieces, int64_t piece_count,
                             cudaStream_t stream);
// The tasks of AccumulateSquares: row_task_starts[s] is the first row task of
// slice s (slice_count + 1 entries, the last the total), likewise columns
// (TieredSquaresTasks in launch_geometry.h).
cudaError_t LaunchAccumulateSquares(const TieredSlice* slices,
                                    int64_t slice_count,
                                    const int64_t* row_task_starts,
                                    const int64_t* column_task_starts,
                                    int64_t row_tasks, int64_t column_tasks,
                                    cudaStream_t stream);
// One block per slice, each a whole tensor (ops.h TieredUpdate).
cudaError_t LaunchTieredUpdate(const TieredCoefficients& coefficients,
                               const TieredSlice* slices, int64_t slice_count,
                               float clip_threshold, cudaStream_t stream);

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_KERNELS_H_
