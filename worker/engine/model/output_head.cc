#include "worker/engine/model/output_head.h"

#include "common/status_macros.h"
#include "worker/engine/model/linear.h"

namespace plateau::engine {

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
  ASSIGN_OR_RETURN(
      saved->logits,
      context.Allocate(MemoryComponent::kVocabProjection, {n, vocab}));
  ASSIGN_OR_RETURN(saved->logsumexp,
                   context.Allocate(MemoryComponent::kVocabProjection, {n}));
  ASSIGN_OR_RETURN(Tensor losses,
                   context.Allocate(MemoryComponent::kVocabProjection, {n}));

  context.ops->RmsNormForward(n, d, x, w.norm, config.rms_epsilon,
                              saved->normed.f32(), saved->inverse_rms.f32());
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
  // d logits = (softmax - onehot) / (the batch's tokens), in place of the
  // logits.
  float* dlogits = saved->logits.f32();
  context.ops->CrossEntropyBackward(
      n, vocab, targets.i32(), saved->logsumexp.f32(),
      static_cast<float>(context.loss_weights.cross_entropy_per_token),
      dlogits);
  ASSIGN_OR_RETURN(Tensor d_normed,
                   context.Allocate(MemoryComponent::kActivations, {n, d}));
  context.ops->Gemm(LinearInputGradArgs(n, d, vocab, dlogits, w.lm_head,
                                        d_normed.f32(), /*accumulate=*/false));
  context.ops->Gemm(LinearWeightGradArgs(n, d, vocab, dlogits,
                                         saved->normed.f32(), grads.lm_head));
  saved->logits.Reset();
  context.ops->Fill(n * d, 0.0f, dx);
  context.ops->RmsNormBackward(n, d, x, w.norm, saved->inverse_rms.f32(),
                               d_normed.f32(), dx, grads.norm);
  return absl::OkStatus();
}

}  // namespace plateau::engine
