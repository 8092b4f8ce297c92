// Cross-entropy over the vocabulary, one block per token row: its max and
// sum of exponentials by block reductions (kernels/cpu/cross_entropy.cc).
#include <math.h>

#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

__device__ float RowMax(int64_t count, const float* row) {
  float max = -INFINITY;
  for (int64_t v = threadIdx.x; v < count; v += blockDim.x) {
    max = fmaxf(max, row[v]);
  }
  return BlockMax(max, -INFINITY);
}

__device__ float RowExpSum(int64_t count, const float* row, float shift) {
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < count; v += blockDim.x) {
    sum += expf(row[v] - shift);
  }
  return BlockSum(sum);
}

__global__ void CrossEntropyForwardKernel(int64_t vocab, const float* logits,
                                          const int32_t* targets, float* losses,
                                          float* logsumexp) {
  const int64_t t = blockIdx.x;
  const float* row = logits + t * vocab;
  const float max = RowMax(vocab, row);
  const float total = max + logf(RowExpSum(vocab, row, max));
  if (threadIdx.x == 0) {
    logsumexp[t] = total;
    losses[t] = total - row[targets[t]];
  }
}

// logsumexp over the blocks seen so far and this one, shifted by the larger
// of the two maxima so that nothing overflows.
__global__ void CrossEntropyFoldBlockKernel(int64_t block, int64_t vocab_begin,
                                            const float* logits,
                                            const int32_t* targets,
                                            float* logsumexp,
                                            float* target_logits) {
  const int64_t t = blockIdx.x;
  const float* row = logits + t * block;
  const float before = logsumexp[t];
  const float shift = fmaxf(before, RowMax(block, row));
  const float sum = RowExpSum(block, row, shift) + expf(before - shift);
  if (threadIdx.x == 0) {
    logsumexp[t] = shift + logf(sum);
    const int64_t column = targets[t] - vocab_begin;
    if (column >= 0 && column < block) target_logits[t] = row[column];
  }
}

// In place: scale * (softmax - onehot) over the block's columns.
__global__ void CrossEntropyBackwardKernel(int64_t block, int64_t vocab_begin,
                                           const int32_t* targets,
                                           const float* logsumexp, float scale,
                                           float* logits) {
  const int64_t t = blockIdx.x;
  float* row = logits + t * block;
  const float total = logsumexp[t];
  const int64_t target_column = targets[t] - vocab_begin;
  for (int64_t v = threadIdx.x; v < block; v += blockDim.x) {
    const float softmax = expf(row[v] - total);
    row[v] = (v == target_column ? softmax - 1.0f : softmax) * scale;
  }
}

}  // namespace

cudaError_t LaunchCrossEntropyForward(int64_t tokens, int64_t vocab,
                                      const float* logits,
                                      const int32_t* targets, float* losses,
                                      float* logsumexp, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0) return cudaSuccess;
  PLATEAU_LAUNCH(CrossEntropyForwardKernel, static_cast<unsigned int>(tokens),
                 RowBlockThreads(vocab), stream)
  (vocab, logits, targets, losses, logsumexp);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                        int64_t vocab_begin,
                                        const float* logits,
                                        const int32_t* targets,
                                        float* logsumexp, float* target_logits,
                                        cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0) return cudaSuccess;
  PLATEAU_LAUNCH(CrossEntropyFoldBlockKernel, static_cast<unsigned int>(tokens),
                 RowBlockThreads(block), stream)
  (block, vocab_begin, logits, targets, logsumexp, target_logits);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyBackward(int64_t tokens, int64_t block,
                                       int64_t vocab_begin,
                                       const int32_t* targets,
                                       const float* logsumexp, float scale,
                                       float* logits, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0 || block == 0) return cudaSuccess;
  PLATEAU_LAUNCH(CrossEntropyBackwardKernel, static_cast<unsigned int>(tokens),
                 RowBlockThreads(block), stream)
  (block, vocab_begin, targets, logsumexp, scale, logits);
  return cudaGetLastError();
}

}  // namespace plateau::kernels::cuda
