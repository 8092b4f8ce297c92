#include "engine/model/logits.h"

#include <algorithm>

namespace plateau::engine {

void ProjectLogits(const LayerContext& context, int64_t tokens, int64_t columns,
                   LinearOperand hidden, LinearOperand weights, Tensor& piece,
                   Tensor& logits) {
  const ModelConfig& config = *context.config;
  const int64_t d = config.d_model;
  if (!RoundsLogits(config)) {
    context.ops->Gemm(
        LinearForwardArgs(tokens, d, columns, hidden, weights, logits.f32(),
                          /*accumulate=*/false, config.matmul_precision));
    return;
  }
  for (int64_t first = 0; first < tokens; first += kLogitsPieceRows) {
    const int64_t rows = std::min(kLogitsPieceRows, tokens - first);
    context.ops->Gemm(LinearForwardArgs(
        rows, d, columns, hidden.At(first * d), weights, piece.f32(),
        /*accumulate=*/false, config.matmul_precision));
    context.ops->CopyToBf16(rows * columns, piece.f32(),
                            logits.bf16() + first * columns);
  }
}

void LogitsCrossEntropyForward(kernels::Ops& ops, int64_t tokens, int64_t vocab,
                               const Tensor& logits, const int32_t* targets,
                               float* losses, float* logsumexp) {
  if (logits.dtype() == DType::kBfloat16) {
    ops.CrossEntropyForwardBf16(tokens, vocab, logits.bf16(), targets, losses,
                                logsumexp);
  } else {
    ops.CrossEntropyForward(tokens, vocab, logits.f32(), targets, losses,
                            logsumexp);
  }
}

void LogitsFoldBlock(kernels::Ops& ops, int64_t tokens, int64_t block,
                     int64_t vocab_begin, const Tensor& logits,
                     const int32_t* targets, float* logsumexp,
                     float* target_logits) {
  if (logits.dtype() == DType::kBfloat16) {
    ops.CrossEntropyFoldBlockBf16(tokens, block, vocab_begin, logits.bf16(),
                                  targets, logsumexp, target_logits);
  } else {
    ops.CrossEntropyFoldBlock(tokens, block, vocab_begin, logits.f32(), targets,
                              logsumexp, target_logits);
  }
}

void LogitsCrossEntropyBackward(kernels::Ops& ops, int64_t tokens,
                                int64_t block, int64_t vocab_begin,
                                const int32_t* targets, const float* logsumexp,
                                float scale, Tensor& logits) {
  if (logits.dtype() == DType::kBfloat16) {
    ops.CrossEntropyBackwardBf16(tokens, block, vocab_begin, targets, logsumexp,
                                 scale, logits.bf16());
  } else {
    ops.CrossEntropyBackward(tokens, block, vocab_begin, targets, logsumexp,
                             scale, logits.f32());
  }
}

}  // namespace plateau::engine
