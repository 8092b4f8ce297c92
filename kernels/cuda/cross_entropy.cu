// Cross-entropy over the vocabulary, one block per token row: its max and
// sum of exponentials by block reductions (kernels/cpu/cross_entropy.cc).
// Templates over the logits, float32 or bf16: the same arithmetic on the
// bf16 values widened exactly.
#include <math.h>

#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

template <typename Logit>
__device__ float RowMax(int64_t count, const Logit* row) {
  float max = -INFINITY;
  for (int64_t v = threadIdx.x; v < count; v += blockDim.x) {
    max = fmaxf(max, ValueOf(row[v]));
  }
  return BlockMax(max, -INFINITY);
}

template <typename Logit>
__device__ float RowExpSum(int64_t count, const Logit* row, float shift) {
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < count; v += blockDim.x) {
    sum += expf(ValueOf(row[v]) - shift);
  }
  return BlockSum(sum);
}

template <typename Logit>
__global__ void CrossEntropyForwardKernel(int64_t vocab, const Logit* logits,
                                          const int32_t* targets, float* losses,
                                          float* logsumexp) {
  const int64_t t = blockIdx.x;
  const Logit* row = logits + t * vocab;
  const float max = RowMax(vocab, row);
  const float total = max + logf(RowExpSum(vocab, row, max));
  if (threadIdx.x == 0) {
    logsumexp[t] = total;
    losses[t] = total - ValueOf(row[targets[t]]);
  }
}

// logsumexp over the blocks seen so far and this one, shifted by the larger
// of the two maxima so that nothing overflows.
template <typename Logit>
__global__ void CrossEntropyFoldBlockKernel(int64_t block, int64_t vocab_begin,
                                            const Logit* logits,
                                            const int32_t* targets,
                                            float* logsumexp,
                                            float* target_logits) {
  const int64_t t = blockIdx.x;
  const Logit* row = logits + t * block;
  const float before = logsumexp[t];
  const float shift = fmaxf(before, RowMax(block, row));
  const float sum = RowExpSum(block, row, shift) + expf(before - shift);
  if (threadIdx.x == 0) {
    logsumexp[t] = shift + logf(sum);
    const int64_t column = targets[t] - vocab_begin;
    if (column >= 0 && column < block) target_logits[t] = ValueOf(row[column]);
  }
}

// In place: scale * (softmax - onehot) over the block's columns.
template <typename Logit>
__global__ void CrossEntropyBackwardKernel(int64_t block, int64_t vocab_begin,
                                           const int32_t* targets,
                                           const float* logsumexp, float scale,
                                           Logit* logits) {
  const int64_t t = blockIdx.x;
  Logit* row = logits + t * block;
  const float total = logsumexp[t];
  const int64_t target_column = targets[t] - vocab_begin;
  for (int64_t v = threadIdx.x; v < block; v += blockDim.x) {
    const float softmax = expf(ValueOf(row[v]) - total);
    StoreAs((v == target_column ? softmax - 1.0f : softmax) * scale, row + v);
  }
}

// The kernels are named by variables: PLATEAU_LAUNCH is a macro, and a
// template's argument list would split its arguments.
template <typename Logit>
cudaError_t LaunchForwardOf(int64_t tokens, int64_t vocab, const Logit* logits,
                            const int32_t* targets, float* losses,
                            float* logsumexp, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0) return cudaSuccess;
  const auto kernel = CrossEntropyForwardKernel<Logit>;
  PLATEAU_LAUNCH(kernel, static_cast<unsigned int>(tokens),
                 RowBlockThreads(vocab), stream)
  (vocab, logits, targets, losses, logsumexp);
  return cudaGetLastError();
}

template <typename Logit>
cudaError_t LaunchFoldBlockOf(int64_t tokens, int64_t block,
                              int64_t vocab_begin, const Logit* logits,
                              const int32_t* targets, float* logsumexp,
                              float* target_logits, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0) return cudaSuccess;
  const auto kernel = CrossEntropyFoldBlockKernel<Logit>;
  PLATEAU_LAUNCH(kernel, static_cast<unsigned int>(tokens),
                 RowBlockThreads(block), stream)
  (block, vocab_begin, logits, targets, logsumexp, target_logits);
  return cudaGetLastError();
}

template <typename Logit>
cudaError_t LaunchBackwardOf(int64_t tokens, int64_t block, int64_t vocab_begin,
                             const int32_t* targets, const float* logsumexp,
                             float scale, Logit* logits, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0 || block == 0) return cudaSuccess;
  const auto kernel = CrossEntropyBackwardKernel<Logit>;
  PLATEAU_LAUNCH(kernel, static_cast<unsigned int>(tokens),
                 RowBlockThreads(block), stream)
  (block, vocab_begin, targets, logsumexp, scale, logits);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCrossEntropyForward(int64_t tokens, int64_t vocab,
                                      const float* logits,
                                      const int32_t* targets, float* losses,
                                      float* logsumexp, cudaStream_t stream) {
  return LaunchForwardOf(tokens, vocab, logits, targets, losses, logsumexp,
                         stream);
}

cudaError_t LaunchCrossEntropyForwardBf16(int64_t tokens, int64_t vocab,
                                          const uint16_t* logits,
                                          const int32_t* targets, float* losses,
                                          float* logsumexp,
                                          cudaStream_t stream) {
  return LaunchForwardOf(tokens, vocab, logits, targets, losses, logsumexp,
                         stream);
}

cudaError_t LaunchCrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                        int64_t vocab_begin,
                                        const float* logits,
                                        const int32_t* targets,
                                        float* logsumexp, float* target_logits,
                                        cudaStream_t stream) {
  return LaunchFoldBlockOf(tokens, block, vocab_begin, logits, targets,
                           logsumexp, target_logits, stream);
}

cudaError_t LaunchCrossEntropyFoldBlockBf16(
    int64_t tokens, int64_t block, int64_t vocab_begin, const uint16_t* logits,
    const int32_t* targets, float* logsumexp, float* target_logits,
    cudaStream_t stream) {
  return LaunchFoldBlockOf(tokens, block, vocab_begin, logits, targets,
                           logsumexp, target_logits, stream);
}

cudaError_t LaunchCrossEntropyBackward(int64_t tokens, int64_t block,
                                       int64_t vocab_begin,
                                       const int32_t* targets,
                                       const float* logsumexp, float scale,
                                       float* logits, cudaStream_t stream) {
  return LaunchBackwardOf(tokens, block, vocab_begin, targets, logsumexp, scale,
                          logits, stream);
}

cudaError_t LaunchCrossEntropyBackwardBf16(int64_t tokens, int64_t block,
                                           int64_t vocab_begin,
                                           const int32_t* targets,
                                           const float* logsumexp, float scale,
                                           uint16_t* logits,
                                           cudaStream_t stream) {
  return LaunchBackwardOf(tokens, block, vocab_begin, targets, logsumexp, scale,
                          logits, stream);
}

}  // namespace plateau::kernels::cuda
