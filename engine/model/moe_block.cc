#include "engine/model/moe_block.h"

#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "engine/model/expert_spill.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/pipelined_experts.h"

namespace plateau::engine {

absl::StatusOr<double> MoeBlockForward(const LayerContext& context,
                                       const MoeParameters<const float>& w,
                                       const float* x, float* out,
                                       MoeActivations* saved) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const MoeBuffers buffers = MoeBuffers::For(config, context.sequences);
  ASSIGN_OR_RETURN(saved->normed, context.Allocate(buffers.normed));
  ASSIGN_OR_RETURN(saved->inverse_rms, context.Allocate(buffers.inverse_rms));
  context.ops->RmsNormForward(n, d, x, w.norm, config.rms_epsilon,
                              saved->normed.f32(), saved->inverse_rms.f32());

  RETURN_IF_ERROR(
      RouteTokens(context, w.router, saved->normed.f32(), &saved->routing));
  RETURN_IF_ERROR(
      PlanDispatch(context, saved->routing.expert_index, &saved->plan));
  std::vector<int64_t> tokens_per_expert(config.experts);
  for (int64_t e = 0; e < config.experts; ++e) {
    tokens_per_expert[e] =
        saved->plan.expert_offsets[e + 1] - saved->plan.expert_offsets[e];
  }
  ASSIGN_OR_RETURN(saved->balance, ComputeLoadBalance(context, saved->routing,
                                                      tokens_per_expert));

  if (config.dispatch_chunk_tokens > 0) {
    ASSIGN_OR_RETURN(
        saved->chunks,
        DispatchChunks::Split(
            context, saved->plan, config.dispatch_chunk_tokens,
            PlanExpertSpill(saved->plan.rank_expert_counts,
                            context.expert_ranks(), config.experts)));
    // The chunks carry what backward needs of the plan.
    saved->plan = DispatchPlan();
    if (out == nullptr) return saved->balance.aux_loss;
    RETURN_IF_ERROR(PipelinedExpertsForward(
        context, w.experts, saved->chunks, saved->normed.f32(),
        saved->routing.gates.f32(), x, out));
    return saved->balance.aux_loss;
  }
  ASSIGN_OR_RETURN(Tensor rows,
                   GatherTokens(context, saved->plan, saved->normed.f32()));
  ASSIGN_OR_RETURN(saved->expert_input,
                   SendToExperts(context, saved->plan, std::move(rows)));
  ASSIGN_OR_RETURN(
      Tensor output,
      ExpertsForward(context, {w.experts, {}}, saved->plan.segments,
                     saved->expert_input, &saved->experts));
  ASSIGN_OR_RETURN(saved->expert_output,
                   ReturnFromExperts(context, saved->plan, std::move(output)));
  if (out != nullptr) {
    CombineTokens(context, saved->plan, saved->expert_output,
                  saved->routing.gates.f32(), x, out);
  }
  return saved->balance.aux_loss;
}

absl::Status MoeBlockBackward(const LayerContext& context,
                              const MoeParameters<const float>& w,
                              const MoeParameters<float>& grads, const float* x,
                              MoeActivations* saved, const float* dout,
                              float* dx) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;

  const MoeBuffers buffers = MoeBuffers::For(config, context.sequences);
  ASSIGN_OR_RETURN(Tensor d_gates, context.Allocate(buffers.d_gates));
  // d_normed accumulates the dispatch's gradient; the unchunked path
  // makes it only once its own full-size buffers are gone.
  Tensor d_normed;
  auto allocate_d_normed = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(d_normed, context.Allocate(buffers.d_normed));
    context.ops->Fill(n * d, 0.0f, d_normed.f32());
    return absl::OkStatus();
  };
  if (config.dispatch_chunk_tokens > 0) {
    RETURN_IF_ERROR(allocate_d_normed());
    RETURN_IF_ERROR(PipelinedExpertsBackward(
        context, w.experts, grads.experts, saved->chunks, saved->normed.f32(),
        saved->routing.gates.f32(), dout, d_normed.f32(), d_gates.f32()));
    saved->chunks = DispatchChunks();
  } else {
    ASSIGN_OR_RETURN(
        Tensor d_expert_output,
        CombineTokensBackward(context, saved->plan, saved->expert_output,
                              saved->routing.gates.f32(), dout, d_gates.f32()));
    saved->expert_output.Reset();
    ASSIGN_OR_RETURN(
        Tensor d_received_output,
        SendToExperts(context, saved->plan, std::move(d_expert_output)));
    ASSIGN_OR_RETURN(
        Tensor d_received_input,
        ExpertsBackward(context, {w.experts, {}}, {grads.experts, {}},
                        saved->plan.segments, std::move(saved->expert_input),
                        std::move(saved->experts),
                        std::move(d_received_output)));
    ASSIGN_OR_RETURN(
        Tensor d_expert_input,
        ReturnFromExperts(context, saved->plan, std::move(d_received_input)));
    RETURN_IF_ERROR(allocate_d_normed());
    GatherTokensBackward(context, saved->plan, d_expert_input, d_normed.f32());
    d_expert_input.Reset();
    saved->plan = DispatchPlan();
  }
  RETURN_IF_ERROR(RouterBackward(
      context, w.router, grads.router, saved->normed.f32(), saved->routing,
      d_gates.f32(), saved->balance, d_normed.f32()));
  saved->routing = RouterActivations();
  saved->normed.Reset();

  // The residual passes dout straight through; the norm adds its part.
  if (dx != dout) context.ops->Copy(n * d, dout, dx);
  context.ops->RmsNormBackward(n, d, x, w.norm, saved->inverse_rms.f32(),
                               d_normed.f32(), dx, grads.norm);
  return absl::OkStatus();
}

}  // namespace plateau::engine
