#include "engine/model/logits.h"

namespace plateau::engine {

void ProjectLogits(const LayerContext& context, int64_t tokens, int64_t columns,
                   LinearOperand hidden, LinearOperand weights,
                   Tensor& logits) {
  const ModelConfig& config = *context.config;
  const bool rounded = logits.dtype() == DType::kBfloat16;
  kernels::GemmArgs args =
      LinearForwardArgs(tokens, config.d_model, columns, hidden, weights,
                        rounded ? nullptr : logits.f32(), /*accumulate=*/false,
                        config.matmul_precision);
  if (rounded) args.c_bf16 = logits.bf16();
  context.ops->Gemm(args);
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
