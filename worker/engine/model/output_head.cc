#include "worker/engine/model/output_head.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "common/status_macros.h"
#include "worker/engine/model/linear.h"

namespace plateau::engine {

namespace {

// Columns [begin, begin + width) of the vocabulary, one block of Ring-DTP.
struct VocabBlock {
  int64_t begin = 0;
  int64_t width = 0;
};

std::vector<VocabBlock> VocabBlocks(const ModelConfig& config) {
  std::vector<VocabBlock> blocks;
  for (int64_t begin = 0; begin < config.vocab; begin += config.vocab_block) {
    blocks.push_back(
        {begin, std::min(config.vocab_block, config.vocab - begin)});
  }
  return blocks;
}

// Ring-DTP's forward on one rank: each block's logits (N, block) are
// computed and folded into every token's running logsumexp and target
// logit, then dropped; loss = logsumexp - target logit.
absl::StatusOr<double> BlockwiseCrossEntropy(
    const LayerContext& context, const OutputHeadParameters<const float>& w,
    const Tensor& targets, OutputHeadActivations* saved) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  ASSIGN_OR_RETURN(Tensor target_logits,
                   context.Allocate(MemoryComponent::kVocabProjection, {n}));
  ASSIGN_OR_RETURN(Tensor logits,
                   context.Allocate(MemoryComponent::kVocabProjection,
                                    {n, config.vocab_block}));
  context.ops->Fill(n, -std::numeric_limits<float>::infinity(),
                    saved->logsumexp.f32());
  for (const VocabBlock& block : VocabBlocks(config)) {
    context.ops->Gemm(LinearForwardArgs(n, d, block.width, saved->normed.f32(),
                                        w.lm_head + block.begin * d,
                                        logits.f32(), /*accumulate=*/false));
    context.ops->CrossEntropyFoldBlock(
        n, block.width, block.begin, logits.f32(), targets.i32(),
        saved->logsumexp.f32(), target_logits.f32());
  }
  return (context.ops->Sum(n, saved->logsumexp.f32()) -
          context.ops->Sum(n, target_logits.f32())) /
         static_cast<double>(n);
}

// Ring-DTP's backward: each block's logits are recomputed, turned into
// their gradient in place, and folded into d_normed and the lm_head
// gradient.
absl::Status BlockwiseCrossEntropyBackward(
    const LayerContext& context, const OutputHeadParameters<const float>& w,
    const OutputHeadParameters<float>& grads, const Tensor& targets,
    const OutputHeadActivations& saved, float* d_normed) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  ASSIGN_OR_RETURN(Tensor logits,
                   context.Allocate(MemoryComponent::kVocabProjection,
                                    {n, config.vocab_block}));
  for (const VocabBlock& block : VocabBlocks(config)) {
    const float* lm_head = w.lm_head + block.begin * d;
    context.ops->Gemm(LinearForwardArgs(n, d, block.width, saved.normed.f32(),
                                        lm_head, logits.f32(),
                                        /*accumulate=*/false));
    context.ops->CrossEntropyBackward(
        n, block.width, block.begin, targets.i32(), saved.logsumexp.f32(),
        static_cast<float>(context.loss_weights.cross_entropy_per_token),
        logits.f32());
    context.ops->Gemm(LinearInputGradArgs(n, d, block.width, logits.f32(),
                                          lm_head, d_normed,
                                          /*accumulate=*/block.begin > 0));
    context.ops->Gemm(LinearWeightGradArgs(n, d, block.width, logits.f32(),
                                           saved.normed.f32(),
                                           grads.lm_head + block.begin * d));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> OutputHeadForward(
    const LayerContext& context, const OutputHeadParameters<const float>& w,
    const float* x, const Tensor& targets, OutputHeadActivations* saved) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const int64_t vocab = config.vocab;
  ASSIGN_OR_RETURN(saved->normed,
                   context.Allocate(MemoryComponent::kActivations, {n, d}));
  ASSIGN_OR_RETURN(saved->inverse_rms,
                   context.Allocate(MemoryComponent::kActivations, {n}));
  ASSIGN_OR_RETURN(saved->logsumexp,
                   context.Allocate(MemoryComponent::kVocabProjection, {n}));
  context.ops->RmsNormForward(n, d, x, w.norm, config.rms_epsilon,
                              saved->normed.f32(), saved->inverse_rms.f32());
  if (config.vocab_block > 0) {
    return BlockwiseCrossEntropy(context, w, targets, saved);
  }

  ASSIGN_OR_RETURN(
      saved->logits,
      context.Allocate(MemoryComponent::kVocabProjection, {n, vocab}));
  ASSIGN_OR_RETURN(Tensor losses,
                   context.Allocate(MemoryComponent::kVocabProjection, {n}));
  // logits = normed . lm_head^T      (N, V)
  context.ops->Gemm(LinearForwardArgs(n, d, vocab, saved->normed.f32(),
                                      w.lm_head, saved->logits.f32(),
                                      /*accumulate=*/false));
  context.ops->CrossEntropyForward(n, vocab, saved->logits.f32(), targets.i32(),
                                   losses.f32(), saved->logsumexp.f32());
  return context.ops->Sum(n, losses.f32()) / static_cast<double>(n);
}

absl::Status OutputHeadBackward(const LayerContext& context,
                                const OutputHeadParameters<const float>& w,
                                const OutputHeadParameters<float>& grads,
                                const float* x, const Tensor& targets,
                                OutputHeadActivations* saved, float* dx) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const int64_t vocab = config.vocab;
  ASSIGN_OR_RETURN(Tensor d_normed,
                   context.Allocate(MemoryComponent::kActivations, {n, d}));
  if (config.vocab_block > 0) {
    RETURN_IF_ERROR(BlockwiseCrossEntropyBackward(context, w, grads, targets,
                                                  *saved, d_normed.f32()));
  } else {
    // d logits = scale * (softmax - onehot), in place of the logits.
    float* dlogits = saved->logits.f32();
    context.ops->CrossEntropyBackward(
        n, vocab, /*vocab_begin=*/0, targets.i32(), saved->logsumexp.f32(),
        static_cast<float>(context.loss_weights.cross_entropy_per_token),
        dlogits);
    context.ops->Gemm(LinearInputGradArgs(n, d, vocab, dlogits, w.lm_head,
                                          d_normed.f32(),
                                          /*accumulate=*/false));
    context.ops->Gemm(LinearWeightGradArgs(n, d, vocab, dlogits,
                                           saved->normed.f32(), grads.lm_head));
  }
  saved->logits.Reset();
  context.ops->Fill(n * d, 0.0f, dx);
  context.ops->RmsNormBackward(n, d, x, w.norm, saved->inverse_rms.f32(),
                               d_normed.f32(), dx, grads.norm);
  return absl::OkStatus();
}

}  // namespace plateau::engine
