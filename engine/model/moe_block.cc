#include "engine/model/moe_block.h"

#include <vector>

#include "common/status_macros.h"
#include "engine/model/dispatch_strategy.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {

absl::StatusOr<RouterLosses> MoeBlockForward(
    const LayerContext& context, const MoeParameters<const float>& w,
    const float* x, float* out, MoeActivations* saved) {
  const ModelConfig& config = *context.config;
  const MoeBuffers buffers = MoeBuffers::For(config, context.sequences);
  ASSIGN_OR_RETURN(Tensor normed, context.Allocate(buffers.normed));
  ASSIGN_OR_RETURN(saved->inverse_rms, context.Allocate(buffers.inverse_rms));
  RmsNormForwardInto(context, x, w.norm, &normed, &saved->inverse_rms);

  RETURN_IF_ERROR(RouteTokens(context, w.router, w.expert_bias, normed,
                              {x, saved->inverse_rms.f32(), w.norm},
                              &saved->routing));
  RETURN_IF_ERROR(
      PlanDispatch(context, saved->routing.expert_index, &saved->plan));
  std::vector<int64_t> tokens_per_expert(config.experts);
  for (int64_t e = 0; e < config.experts; ++e) {
    tokens_per_expert[e] =
        saved->plan.expert_offsets[e + 1] - saved->plan.expert_offsets[e];
  }
  ASSIGN_OR_RETURN(saved->balance, ComputeLoadBalance(context, saved->routing,
                                                      tokens_per_expert));
  RETURN_IF_ERROR(
      context.dispatch->Forward(context, w.experts, normed, x, out, saved));
  if (out != nullptr && config.shared_experts > 0) {
    RETURN_IF_ERROR(SharedExpertsForward(context, w.shared, normed, out));
  }
  return saved->balance.losses;
}

absl::Status MoeBlockBackward(const LayerContext& context,
                              const MoeParameters<const float>& w,
                              const MoeParameters<float>& grads, const float* x,
                              MoeActivations* saved, Tensor* gradient) {
  const ModelConfig& config = *context.config;
  const MoeBuffers buffers = MoeBuffers::For(config, context.sequences);
  const NormInput normed{x, saved->inverse_rms.f32(), w.norm};
  ASSIGN_OR_RETURN(Tensor d_gates, context.Allocate(buffers.d_gates));
  ASSIGN_OR_RETURN(
      Tensor d_normed,
      context.dispatch->Backward(context, w.experts, grads.experts, normed,
                                 *gradient, d_gates.f32(), saved));
  if (config.shared_experts > 0) {
    RETURN_IF_ERROR(SharedExpertsBackward(context, w.shared, grads.shared,
                                          normed, *gradient, d_normed.f32()));
  }
  ASSIGN_OR_RETURN(
      Tensor d_logits,
      RouterBackward(context, w.router, saved->routing, d_gates.f32(),
                     saved->balance, d_normed.f32()));
  saved->routing = RouterActivations();
  // The router's weight gradient reads the normed input, which the block
  // does not keep: a piece at a time, made again.
  RETURN_IF_ERROR(ForEachNormedPiece(
      context, normed, buffers.normed_piece, buffers.normed_piece_inverse_rms,
      [&](int64_t first, int64_t rows, const float* normed_rows) {
        RouterWeightGradient(context, first, rows, d_logits, normed_rows,
                             grads.router);
      }));
  d_logits.Reset();

  // The residual passes dout straight through; the norm adds its part.
  AddNormGradient(context, x, w.norm, saved->inverse_rms.f32(), d_normed.f32(),
                  gradient, grads.norm);
  return absl::OkStatus();
}

}  // namespace plateau::engine
