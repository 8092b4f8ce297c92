#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {

void CudaOps::CrossEntropyForward(int64_t tokens, int64_t vocab,
                                  const float* logits, const int32_t* targets,
                                  float* losses, float* logsumexp) {
  if (failed()) return;
  Check(LaunchCrossEntropyForward(tokens, vocab, logits, targets, losses,
                                  logsumexp, compute_stream_),
        "CrossEntropyForward");
}

void CudaOps::CrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                    int64_t vocab_begin, const float* logits,
                                    const int32_t* targets, float* logsumexp,
                                    float* target_logits) {
  if (failed()) return;
  Check(LaunchCrossEntropyFoldBlock(tokens, block, vocab_begin, logits, targets,
                                    logsumexp, target_logits, compute_stream_),
        "CrossEntropyFoldBlock");
}

void CudaOps::CrossEntropyBackward(int64_t tokens, int64_t block,
                                   int64_t vocab_begin, const int32_t* targets,
                                   const float* logsumexp, float scale,
                                   float* logits) {
  if (failed()) return;
  Check(LaunchCrossEntropyBackward(tokens, block, vocab_begin, targets,
                                   logsumexp, scale, logits, compute_stream_),
        "CrossEntropyBackward");
}

void CudaOps::CrossEntropyForwardBf16(int64_t tokens, int64_t vocab,
                                      const uint16_t* logits,
                                      const int32_t* targets, float* losses,
                                      float* logsumexp) {
  if (failed()) return;
  Check(LaunchCrossEntropyForwardBf16(tokens, vocab, logits, targets, losses,
                                      logsumexp, compute_stream_),
        "CrossEntropyForwardBf16");
}

void CudaOps::CrossEntropyFoldBlockBf16(
    int64_t tokens, int64_t block, int64_t vocab_begin, const uint16_t* logits,
    const int32_t* targets, float* logsumexp, float* target_logits) {
  if (failed()) return;
  Check(LaunchCrossEntropyFoldBlockBf16(tokens, block, vocab_begin, logits,
                                        targets, logsumexp, target_logits,
                                        compute_stream_),
        "CrossEntropyFoldBlockBf16");
}

void CudaOps::CrossEntropyBackwardBf16(int64_t tokens, int64_t block,
                                       int64_t vocab_begin,
                                       const int32_t* targets,
                                       const float* logsumexp, float scale,
                                       uint16_t* logits) {
  if (failed()) return;
  Check(
      LaunchCrossEntropyBackwardBf16(tokens, block, vocab_begin, targets,
                                     logsumexp, scale, logits, compute_stream_),
      "CrossEntropyBackwardBf16");
}

}  // namespace plateau::kernels::cuda
