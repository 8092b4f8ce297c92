// CpuOps cross-entropy over the vocabulary, one token per row, over float32
// or bf16 logits: the same arithmetic either way, on a bf16 row widened
// exactly into a float32 one.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vector_math.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int64_t kTokenGrain = 4;

// A thread's float32 copy of one row, for bf16 logits; float32 ones are
// read and written where they are.
template <typename Logit>
class RowValues {
 public:
  explicit RowValues(int64_t width)
      : widened_(std::is_same_v<Logit, float> ? 0 : width), width_(width) {}

  const float* Read(const Logit* row) {
    if constexpr (std::is_same_v<Logit, float>) {
      return row;
    } else {
      return Widen(row);
    }
  }
  float* ReadForWriting(Logit* row) {
    if constexpr (std::is_same_v<Logit, float>) {
      return row;
    } else {
      return Widen(row);
    }
  }
  // Writes back what ReadForWriting returned, rounded once for bf16.
  void Write(const float* values, Logit* row) {
    if constexpr (!std::is_same_v<Logit, float>) {
      ConvertToBf16(absl::MakeConstSpan(values, width_),
                    absl::MakeSpan(row, width_));
    }
  }

 private:
  float* Widen(const Logit* row) {
    WidenBf16(absl::MakeConstSpan(row, width_), absl::MakeSpan(widened_));
    return widened_.data();
  }

  std::vector<float> widened_;
  const int64_t width_;
};

template <typename Logit>
void ForwardOf(ThreadPool& pool, int64_t tokens, int64_t vocab,
               const Logit* logits, const int32_t* targets, float* losses,
               float* logsumexp) {
  pool.ParallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    RowValues<Logit> values(vocab);
    std::vector<float> exponentials(vocab);
    for (int64_t t = begin; t < end; ++t) {
      const float* row = values.Read(logits + t * vocab);
      const float max = VectorMax(vocab, row);
      const float sum = ExpAndSum(vocab, row, 1.0f, max, exponentials.data());
      logsumexp[t] = max + std::log(sum);
      losses[t] = logsumexp[t] - row[targets[t]];
    }
  });
}

template <typename Logit>
void FoldBlockOf(ThreadPool& pool, int64_t tokens, int64_t block,
                 int64_t vocab_begin, const Logit* logits,
                 const int32_t* targets, float* logsumexp,
                 float* target_logits) {
  pool.ParallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    RowValues<Logit> values(block);
    std::vector<float> exponentials(block);
    for (int64_t t = begin; t < end; ++t) {
      const float* row = values.Read(logits + t * block);
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

template <typename Logit>
void BackwardOf(ThreadPool& pool, int64_t tokens, int64_t block,
                int64_t vocab_begin, const int32_t* targets,
                const float* logsumexp, float scale, Logit* logits) {
  pool.ParallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    RowValues<Logit> values(block);
    for (int64_t t = begin; t < end; ++t) {
      float* row = values.ReadForWriting(logits + t * block);
      // softmax = exp(logit - logsumexp), written over the logits.
      ExpAndSum(block, row, 1.0f, logsumexp[t], row);
      const int64_t column = targets[t] - vocab_begin;
      if (column >= 0 && column < block) row[column] -= 1.0f;
      for (int64_t v = 0; v < block; ++v) row[v] *= scale;
      values.Write(row, logits + t * block);
    }
  });
}

}  // namespace

void CpuOps::CrossEntropyForward(int64_t tokens, int64_t vocab,
                                 const float* logits, const int32_t* targets,
                                 float* losses, float* logsumexp) {
  ForwardOf(pool_, tokens, vocab, logits, targets, losses, logsumexp);
}

void CpuOps::CrossEntropyForwardBf16(int64_t tokens, int64_t vocab,
                                     const uint16_t* logits,
                                     const int32_t* targets, float* losses,
                                     float* logsumexp) {
  ForwardOf(pool_, tokens, vocab, logits, targets, losses, logsumexp);
}

void CpuOps::CrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                   int64_t vocab_begin, const float* logits,
                                   const int32_t* targets, float* logsumexp,
                                   float* target_logits) {
  FoldBlockOf(pool_, tokens, block, vocab_begin, logits, targets, logsumexp,
              target_logits);
}

void CpuOps::CrossEntropyFoldBlockBf16(int64_t tokens, int64_t block,
                                       int64_t vocab_begin,
                                       const uint16_t* logits,
                                       const int32_t* targets, float* logsumexp,
                                       float* target_logits) {
  FoldBlockOf(pool_, tokens, block, vocab_begin, logits, targets, logsumexp,
              target_logits);
}

void CpuOps::CrossEntropyBackward(int64_t tokens, int64_t block,
                                  int64_t vocab_begin, const int32_t* targets,
                                  const float* logsumexp, float scale,
                                  float* logits) {
  BackwardOf(pool_, tokens, block, vocab_begin, targets, logsumexp, scale,
             logits);
}

void CpuOps::CrossEntropyBackwardBf16(int64_t tokens, int64_t block,
                                      int64_t vocab_begin,
                                      const int32_t* targets,
                                      const float* logsumexp, float scale,
                                      uint16_t* logits) {
  BackwardOf(pool_, tokens, block, vocab_begin, targets, logsumexp, scale,
             logits);
}

}  // namespace plateau::kernels::cpu
