// CpuOps cross-entropy over the vocabulary, one token per row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vector_math.h"

namespace plateau::kernels::cpu {

void CpuOps::CrossEntropyForward(int64_t tokens, int64_t vocab,
                                 const float* logits, const int32_t* targets,
                                 float* losses, float* logsumexp) {
  pool_.ParallelFor(tokens, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> exponentials(vocab);
    for (int64_t t = begin; t < end; ++t) {
      const float* row = logits + t * vocab;
      const float max = VectorMax(vocab, row);
      const float sum = ExpAndSum(vocab, row, 1.0f, max, exponentials.data());
      logsumexp[t] = max + std::log(sum);
      losses[t] = logsumexp[t] - row[targets[t]];
    }
  });
}

void CpuOps::CrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                   int64_t vocab_begin, const float* logits,
                                   const int32_t* targets, float* logsumexp,
                                   float* target_logits) {
  pool_.ParallelFor(tokens, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> exponentials(block);
    for (int64_t t = begin; t < end; ++t) {
      const float* row = logits + t * block;
      // logsumexp over the rows seen so far and this block, shifted by the
      // larger of the two maxima so that nothing overflows.
      const float shift = std::max(logsumexp[t], VectorMax(block, row));
      const float sum =
          ExpAndSum(block, row, 1.0f, shift, exponentials.data()) +
          std::exp(logsumexp[t] - shift);
      logsumexp[t] = shift + std::log(sum);
      const int64_t column = targets[t] - vocab_begin;
      if (column >= 0 && column < block) target_logits[t] = row[column];
    }
  });
}

void CpuOps::CrossEntropyBackward(int64_t tokens, int64_t block,
                                  int64_t vocab_begin, const int32_t* targets,
                                  const float* logsumexp, float scale,
                                  float* logits) {
  pool_.ParallelFor(tokens, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = logits + t * block;
      // softmax = exp(logit - logsumexp), written over the logits.
      ExpAndSum(block, row, 1.0f, logsumexp[t], row);
      const int64_t column = targets[t] - vocab_begin;
      if (column >= 0 && column < block) row[column] -= 1.0f;
      for (int64_t v = 0; v < block; ++v) row[v] *= scale;
    }
  });
}

}  // namespace plateau::kernels::cpu
