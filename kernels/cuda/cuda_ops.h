// The CUDA backend of kernels/ops.h on one device: cuBLAS for the matrix
// products (grouped products in one cublasGemmGroupedBatchedEx call), the
// kernels of kernels/cuda/*.cu for the rest, float32 storage throughout.
//
// Ordering: kernels run in call order on the legacy default stream (so work
// of NcclCommunicator, which uses that stream too, is ordered with them);
// a call returns once its work is queued, except those that hand results to
// the host (the sums, ComputeExpertLayout's offsets, TieredMeasure), which
// wait for them. CopyFromHost and CopyToHost return once the bytes have
// arrived, and first wait for every kernel queued before them.
//
// Thread safety: one call at a time (ops.h), except that CopyFromHost and
// CopyToHost may also be called from other threads at any time (the
// CopyEngine's): each such copy runs on a copy stream of its own, so copies
// overlap the kernels.
//
// Errors: a failed launch, copy or cuBLAS call is recorded (status()), and
// from then on every call does nothing but zero its host outputs; the engine
// checks status() at the end of each step and before it writes a
// checkpoint. Memory for the kernels' scratch comes from a ScratchArena, so
// that it is accounted as the engine's other device memory is.
#ifndef PLATEAU_KERNELS_CUDA_CUDA_OPS_H_
#define PLATEAU_KERNELS_CUDA_CUDA_OPS_H_

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/launch_geometry.h"
#include "kernels/cuda/matmul_precision.h"
#include "kernels/ops.h"
#include "kernels/scratch_arena.h"

namespace plateau::kernels::cuda {

struct CudaOpsOptions {
  int device = 0;
  MatmulPrecision matmul_precision = MatmulPrecision::kTensorFloat32;
  ScratchArena* scratch = nullptr;  // Not owned; must outlive the ops.
};

class CudaOps final : public Ops {
 public:
  // FAILED_PRECONDITION "no CUDA device: ..." without a usable device;
  // INVALID_ARGUMENT for a device index the runtime does not have.
  static absl::StatusOr<std::unique_ptr<CudaOps>> Create(
      const CudaOpsOptions& options);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  const char* name() const override { return "cuda"; }
  absl::Status status() const override;
  // Waits for everything queued; the first error, if any.
  absl::Status Synchronize();

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
  void CombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                   const float* rows, const int32_t* assignment_row,
                   const float* gates, const float* residual,
                   float* out) override;
  void CombineRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                           const float* rows, const int32_t* assignment_row,
                           const float* gates, const float* dout, float* drows,
                           float* dgates) override;
  void GatherRowsBackwardBf16(int64_t tokens, int64_t top_k, int64_t dim,
                              const uint16_t* drows,
                              const int32_t* assignment_row,
                              float* dx) override;
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
  // A copy stream and the event by which it waits for the kernels.
  struct CopyLane {
    cudaStream_t stream = nullptr;
    cudaEvent_t kernels_done = nullptr;
  };

  CudaOps(const CudaOpsOptions& options, const CublasLibrary* cublas,
          cublasHandle_t blas);

  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Records the first error; false when `error` is one.
  bool Check(cudaError_t error, const char* what);
  bool CheckBlas(cublasStatus_t status, const char* what);
  void Fail(absl::Status status);

  // Scratch of `bytes`, or null (the error recorded).
  char* Scratch(int64_t bytes, const char* what);
  // Copies `bytes` of host memory to the device at `device` on the compute
  // stream. REQUIRES: `host` is pageable (not pinned) memory, which the
  // driver stages before returning, so the buffer may be reused at once.
  bool Upload(const void* host, int64_t bytes, void* device, const char* what);
  // Copies device results to the host, waiting for them.
  bool Download(const void* device, int64_t bytes, void* host,
                const char* what);
  void CopyOnLane(int64_t bytes, const void* source, void* destination,
                  cudaMemcpyKind kind);
  CopyLane* TakeLane();
  void ReturnLane(CopyLane* lane);
  double ReduceSum(int64_t count, const float* x, bool squares,
                   const char* what);
  bool CheckAttentionShape(const AttentionShape& shape);
  // Input: float or uint16_t (bf16), as the Attention...Bf16 ops take it.
  template <typename Input>
  void AttentionForwardOf(const AttentionShape& shape, const Input* q,
                          const Input* k, const Input* v, int64_t qkv_stride,
                          Input* out, int64_t out_stride, float* logsumexp);
  template <typename Input>
  void AttentionBackwardOf(const AttentionShape& shape, const Input* q,
                           const Input* k, const Input* v, int64_t qkv_stride,
                           const Input* out, const float* dout,
                           int64_t out_stride, const float* logsumexp,
                           float* dq, float* dk, float* dv);
  cublasComputeType_t Float32ComputeType() const;
  // A bf16 product (IsBf16Product), in tiles when its float32 operands'
  // bf16 copies exceed the staging.
  void Bf16Gemm(const GemmArgs& args);
  // A bf16 product of operands `a` and `b` in bf16 (args' own ignored).
  void GemmOfBf16(const GemmArgs& args, const uint16_t* a, const uint16_t* b);

  // Host bytes to upload (UploadAll).
  struct HostBytes {
    const void* data;
    int64_t bytes;
  };
  static HostBytes SlicesBytes(absl::Span<const TieredSlice> slices);
  static HostBytes PiecesBytes(const std::vector<SlicePiece>& pieces);
  // Uploads the arrays into one scratch reservation, followed by
  // output_bytes for results: their places there in order, the output's
  // last. Empty on an error (recorded).
  std::vector<char*> UploadAll(std::initializer_list<HostBytes> arrays,
                               int64_t output_bytes, const char* what);

  const int device_;
  const MatmulPrecision matmul_precision_;
  ScratchArena* const scratch_;
  const CublasLibrary& cublas_;
  cublasHandle_t blas_;
  // The legacy default stream, shared with NCCL (see above).
  const cudaStream_t compute_stream_ = nullptr;
  int64_t staging_bytes_ = kDefaultMatmulStagingBytes;

  std::atomic<bool> failed_{false};
  mutable absl::Mutex error_mutex_;
  absl::Status first_error_ ABSL_GUARDED_BY(error_mutex_);

  absl::Mutex lanes_mutex_;
  std::vector<std::unique_ptr<CopyLane>> lanes_ ABSL_GUARDED_BY(lanes_mutex_);
  std::vector<CopyLane*> free_lanes_ ABSL_GUARDED_BY(lanes_mutex_);
};

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_CUDA_OPS_H_
