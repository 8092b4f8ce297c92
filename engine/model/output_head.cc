#include "engine/model/output_head.h"

#include <cstdint>

#include "common/status_macros.h"
#include "engine/model/boundary_input.h"
#include "engine/model/fill_with_zeros.h"
#include "engine/model/linear.h"
#include "engine/model/logits.h"
#include "engine/model/output_head_footprint.h"
#include "engine/model/ring_dtp_head.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {
namespace {

// The plain head: the (N, vocab) logits (logits.h), kept from forward to
// backward.
class PlainHead final : public HeadStrategy {
 public:
  absl::StatusOr<double> Forward(const LayerContext& context,
                                 const OutputHeadParameters<const float>& w,
                                 const Tensor& targets,
                                 OutputHeadActivations* saved) const override {
    const ModelConfig& config = *context.config;
    const int64_t n = context.tokens();
    const int64_t vocab = config.vocab;
    const OutputHeadBuffers buffers =
        OutputHeadBuffers::For(config, context.sequences);
    ASSIGN_OR_RETURN(saved->logits, context.Allocate(buffers.logits));
    // logits = normed . lm_head^T      (N, V)
    ProjectLogits(context, n, vocab, RowsOf(saved->normed), w.lm_head,
                  saved->logits);
    ASSIGN_OR_RETURN(Tensor losses, context.Allocate(buffers.losses));
    LogitsCrossEntropyForward(*context.ops, n, vocab, saved->logits,
                              targets.i32(), losses.f32(),
                              saved->logsumexp.f32());
    return context.ops->Sum(n, losses.f32()) / static_cast<double>(n);
  }

  absl::Status Backward(const LayerContext& context,
                        const OutputHeadParameters<const float>& w,
                        const OutputHeadParameters<float>& grads,
                        const Tensor& targets, OutputHeadActivations* saved,
                        float* d_normed) const override {
    const ModelConfig& config = *context.config;
    const int64_t n = context.tokens();
    const int64_t d = config.d_model;
    const int64_t vocab = config.vocab;
    // d logits = scale * (softmax - onehot), in place of the logits.
    LogitsCrossEntropyBackward(
        *context.ops, n, vocab, /*vocab_begin=*/0, targets.i32(),
        saved->logsumexp.f32(),
        static_cast<float>(context.loss_weights.cross_entropy_per_token),
        saved->logits);
    const LinearOperand dlogits = RowsOf(saved->logits);
    context.ops->Gemm(
        LinearInputGradArgs(n, d, vocab, dlogits, w.lm_head, d_normed,
                            /*accumulate=*/false, config.matmul_precision));
    context.ops->Gemm(LinearWeightGradArgs(n, d, vocab, dlogits,
                                           RowsOf(saved->normed), grads.lm_head,
                                           config.matmul_precision));
    return absl::OkStatus();
  }
};

}  // namespace

const HeadStrategy& HeadStrategyFor(const ModelConfig& config) {
  static const PlainHead plain;
  static const RingDtpHead ring;
  if (config.vocab_block > 0) return ring;
  return plain;
}

absl::StatusOr<double> OutputHeadForward(
    const LayerContext& context, const OutputHeadParameters<const float>& w,
    const Tensor& x, const Tensor& targets, OutputHeadActivations* saved) {
  const ModelConfig& config = *context.config;
  const OutputHeadBuffers buffers =
      OutputHeadBuffers::For(config, context.sequences);
  ASSIGN_OR_RETURN(saved->normed, context.Allocate(buffers.normed));
  ASSIGN_OR_RETURN(saved->inverse_rms, context.Allocate(buffers.inverse_rms));
  ASSIGN_OR_RETURN(saved->logsumexp, context.Allocate(buffers.logsumexp));
  RETURN_IF_ERROR(CheckBoundaryInput(config, x, "the output head"));
  NormBoundary(context, x, w.norm, &saved->normed, &saved->inverse_rms);
  return context.head->Forward(context, w, targets, saved);
}

absl::Status OutputHeadBackward(const LayerContext& context,
                                const OutputHeadParameters<const float>& w,
                                const OutputHeadParameters<float>& grads,
                                const Tensor& x, const Tensor& targets,
                                OutputHeadActivations* saved, Tensor* dx) {
  const ModelConfig& config = *context.config;
  const OutputHeadBuffers buffers =
      OutputHeadBuffers::For(config, context.sequences);
  RETURN_IF_ERROR(CheckBoundaryInput(config, x, "the output head"));
  ASSIGN_OR_RETURN(Tensor d_normed, context.Allocate(buffers.d_normed));
  RETURN_IF_ERROR(context.head->Backward(context, w, grads, targets, saved,
                                         d_normed.f32()));
  saved->logits.Reset();
  FillWithZeros(*context.ops, *dx);
  AddBoundaryNormGradient(context, x, w.norm, saved->inverse_rms.f32(),
                          d_normed.f32(), dx, grads.norm);
  return absl::OkStatus();
}

}  // namespace plateau::engine
