// CpuOps cross-entropy over the vocabulary, one token per row.
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

void CpuOps::CrossEntropyBackward(int64_t tokens, int64_t vocab,
                                  const int32_t* targets,
                                  const float* logsumexp, float scale,
                                  float* logits) {
  pool_.ParallelFor(tokens, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = logits + t * vocab;
      // softmax = exp(logit - logsumexp), written over the logits.
      ExpAndSum(vocab, row, 1.0f, logsumexp[t], row);
      row[targets[t]] -= 1.0f;
      for (int64_t v = 0; v < vocab; ++v) row[v] *= scale;
    }
  });
}

}  // namespace plateau::kernels::cpu
