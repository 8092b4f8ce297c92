#include "engine/model/dispatch_strategy.h"

#include <utility>

#include "common/status_macros.h"
#include "engine/model/dispatch_chunks.h"
#include "engine/model/expert_spill.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/pipelined_experts.h"
#include "engine/model/token_dispatcher.h"

namespace plateau::engine {
namespace {

// The (N, D) gradient the dispatch's backward accumulates into, zeroed.
absl::StatusOr<Tensor> ZeroedNormedGradient(const LayerContext& context) {
  ASSIGN_OR_RETURN(
      Tensor d_normed,
      context.Allocate(
          MoeBuffers::For(*context.config, context.sequences).d_normed));
  context.ops->Fill(d_normed.elements(), 0.0f, d_normed.f32());
  return d_normed;
}

class WholeDispatch final : public DispatchStrategy {
 public:
  absl::Status Forward(const LayerContext& context,
                       const ExpertParameters<const float>& w,
                       const Tensor& normed, const float* x, float* out,
                       MoeActivations* saved) const override {
    ASSIGN_OR_RETURN(Tensor rows, GatherTokens(context, saved->plan, normed));
    ASSIGN_OR_RETURN(saved->expert_input,
                     SendToExperts(context, saved->plan, std::move(rows)));
    ASSIGN_OR_RETURN(Tensor output,
                     ExpertsForward(context, {w, {}}, saved->plan.segments,
                                    saved->expert_input, &saved->experts));
    ASSIGN_OR_RETURN(
        saved->expert_output,
        ReturnFromExperts(context, saved->plan, std::move(output)));
    if (out != nullptr) {
      CombineTokens(context, saved->plan, saved->expert_output,
                    saved->routing.gates.f32(), x, out);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> Backward(const LayerContext& context,
                                  const ExpertParameters<const float>& w,
                                  const ExpertParameters<float>& grads,
                                  const NormInput& /*normed*/,
                                  const Tensor& dout, float* d_gates,
                                  MoeActivations* saved) const override {
    ASSIGN_OR_RETURN(
        Tensor d_expert_output,
        CombineTokensBackward(context, saved->plan, saved->expert_output,
                              saved->routing.gates.f32(), dout, d_gates));
    saved->expert_output.Reset();
    ASSIGN_OR_RETURN(
        Tensor d_received_output,
        SendToExperts(context, saved->plan, std::move(d_expert_output)));
    ASSIGN_OR_RETURN(
        Tensor d_received_input,
        ExpertsBackward(context, {w, {}}, {grads, {}}, saved->plan.segments,
                        std::move(saved->expert_input),
                        std::move(saved->experts),
                        std::move(d_received_output)));
    ASSIGN_OR_RETURN(
        Tensor d_expert_input,
        ReturnFromExperts(context, saved->plan, std::move(d_received_input)));
    // Made only now that the full-size dispatch buffers are gone.
    ASSIGN_OR_RETURN(Tensor d_normed, ZeroedNormedGradient(context));
    GatherTokensBackward(context, saved->plan, d_expert_input, d_normed.f32());
    d_expert_input.Reset();
    saved->plan = DispatchPlan();
    return d_normed;
  }
};

class ChunkedDispatch final : public DispatchStrategy {
 public:
  absl::Status Forward(const LayerContext& context,
                       const ExpertParameters<const float>& w,
                       const Tensor& normed, const float* x, float* out,
                       MoeActivations* saved) const override {
    const ModelConfig& config = *context.config;
    ASSIGN_OR_RETURN(
        saved->chunks,
        DispatchChunks::Split(
            context, saved->plan, config.dispatch_chunk_tokens,
            PlanExpertSpill(saved->plan.rank_expert_counts,
                            context.expert_ranks(), config.experts)));
    // The chunks carry what backward needs of the plan.
    saved->plan = DispatchPlan();
    if (out == nullptr) return absl::OkStatus();
    return PipelinedExpertsForward(context, w, saved->chunks, normed,
                                   saved->routing.gates.f32(), x, out);
  }

  absl::StatusOr<Tensor> Backward(const LayerContext& context,
                                  const ExpertParameters<const float>& w,
                                  const ExpertParameters<float>& grads,
                                  const NormInput& normed, const Tensor& dout,
                                  float* d_gates,
                                  MoeActivations* saved) const override {
    ASSIGN_OR_RETURN(Tensor d_normed, ZeroedNormedGradient(context));
    RETURN_IF_ERROR(PipelinedExpertsBackward(context, w, grads, saved->chunks,
                                             normed, saved->routing.gates.f32(),
                                             dout, d_normed.f32(), d_gates));
    saved->chunks = DispatchChunks();
    return d_normed;
  }
};

}  // namespace

const DispatchStrategy& DispatchStrategyFor(const ModelConfig& config) {
  static const WholeDispatch whole;
  static const ChunkedDispatch chunked;
  if (config.dispatch_chunk_tokens > 0) return chunked;
  return whole;
}

}  // namespace plateau::engine
