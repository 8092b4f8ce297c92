#include "engine/model/router.h"

#include "common/status_macros.h"
#include "engine/model/linear.h"
#include "engine/model/moe_footprint.h"

namespace plateau::engine {
namespace {

kernels::RouterShape RouterShapeOf(const LayerContext& context) {
  kernels::RouterShape shape;
  shape.tokens = context.tokens();
  shape.experts = context.config->experts;
  shape.top_k = context.config->top_k;
  shape.score = context.config->router_score;
  return shape;
}

}  // namespace

absl::Status RouteTokens(const LayerContext& context, const float* weight,
                         const float* expert_bias, const Tensor& normed,
                         const NormInput& input, RouterActivations* routing) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t experts = config.experts;
  const MoeBuffers buffers = MoeBuffers::For(config, context.sequences);
  ASSIGN_OR_RETURN(Tensor logits, context.Allocate(buffers.logits));
  ASSIGN_OR_RETURN(routing->probs, context.Allocate(buffers.probs));
  ASSIGN_OR_RETURN(routing->expert_index,
                   context.Allocate(buffers.expert_index));
  ASSIGN_OR_RETURN(routing->gates, context.Allocate(buffers.gates));
  if (buffers.has_z_loss) {
    ASSIGN_OR_RETURN(routing->logsumexp,
                     context.Allocate(buffers.router_logsumexp));
  }
  if (buffers.has_score_sums) {
    ASSIGN_OR_RETURN(routing->score_sums,
                     context.Allocate(buffers.router_score_sums));
  }
  // logits = x . Wr^T      (N, E), in float32 whatever the model's
  // precision, as Megatron-Core's router does: a bf16 rounding of the
  // scores would flip near-tied top-k choices, and the product is tiny.
  const auto route = [&](int64_t first, int64_t rows, const float* x) {
    context.ops->Gemm(LinearForwardArgs(
        rows, config.d_model, experts, FloatOperand(x), FloatOperand(weight),
        logits.f32() + first * experts,
        /*accumulate=*/false, kernels::GemmPrecision::kFloat32));
  };
  if (normed.dtype() == DType::kFloat32) {
    route(0, n, normed.f32());
  } else {
    RETURN_IF_ERROR(ForEachNormedPiece(context, input, buffers.router_piece,
                                       buffers.router_piece_inverse_rms,
                                       route));
  }
  context.ops->RouterForward(
      RouterShapeOf(context), logits.f32(), expert_bias, routing->probs.f32(),
      routing->expert_index.i32(), routing->gates.f32(),
      buffers.has_z_loss ? routing->logsumexp.f32() : nullptr,
      buffers.has_score_sums ? routing->score_sums.f32() : nullptr);
  return absl::OkStatus();
}

absl::StatusOr<LoadBalance> ComputeLoadBalance(
    const LayerContext& context, const RouterActivations& routing,
    const std::vector<int64_t>& tokens_per_expert) {
  const ModelConfig& config = *context.config;
  const int64_t experts = config.experts;
  const bool has_z_loss = config.z_loss_coefficient > 0.0f;
  // [counts (E) | probability sums (E) | with a z-loss, sum_t lse_t^2],
  // summed over the batch group.
  std::vector<double> sums(2 * experts + (has_z_loss ? 1 : 0));
  for (int64_t e = 0; e < experts; ++e) {
    sums[e] = static_cast<double>(tokens_per_expert[e]);
  }
  context.ops->ColumnSums(context.tokens(), experts, routing.probs.f32(),
                          absl::MakeSpan(sums).subspan(experts, experts));
  if (has_z_loss) {
    sums[2 * experts] =
        context.ops->SumOfSquares(context.tokens(), routing.logsumexp.f32());
  }
  if (context.batch_ranks() > 1) {
    RETURN_IF_ERROR(context.groups.batch->AllReduceSum(
        sums.data(), static_cast<int64_t>(sums.size())));
  }
  const double tokens =
      static_cast<double>(context.tokens()) * context.batch_ranks();
  LoadBalance balance;
  balance.tokens_per_expert.resize(experts);
  balance.dprobs_per_expert.resize(experts);
  const double scale =
      static_cast<double>(config.load_balancing_coefficient) * experts;
  for (int64_t e = 0; e < experts; ++e) {
    balance.tokens_per_expert[e] = static_cast<int64_t>(sums[e]);
    const double fraction = sums[e] / (tokens * config.top_k);
    const double mean_prob = sums[experts + e] / tokens;
    balance.losses.load_balancing += scale * fraction * mean_prob;
    // P_e = (1/N) sum_t p[t, e] over the group's N tokens, so
    // d aux / d p[t, e] = scale * f_e / N for each of this rank's tokens.
    balance.dprobs_per_expert[e] = static_cast<float>(
        context.loss_weights.router_losses * scale * fraction / tokens);
  }
  if (has_z_loss) {
    const double coefficient = config.z_loss_coefficient;
    balance.losses.z_loss = coefficient * sums[2 * experts] / tokens;
    // z = (c / N) sum_t lse_t^2 over the group's N tokens.
    balance.z_loss_scale = static_cast<float>(
        context.loss_weights.router_losses * 2.0 * coefficient / tokens);
  }
  return balance;
}

absl::StatusOr<Tensor> RouterBackward(const LayerContext& context,
                                      const float* weight,
                                      const RouterActivations& routing,
                                      const float* dgates,
                                      const LoadBalance& balance, float* dx) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t experts = config.experts;
  ASSIGN_OR_RETURN(
      Tensor dlogits,
      context.Allocate(MoeBuffers::For(config, context.sequences).d_logits));
  context.ops->RouterBackward(
      RouterShapeOf(context), routing.probs.f32(), routing.expert_index.i32(),
      routing.gates.f32(), dgates, balance.dprobs_per_expert,
      routing.logsumexp.empty() ? nullptr : routing.logsumexp.f32(),
      balance.z_loss_scale,
      routing.score_sums.empty() ? nullptr : routing.score_sums.f32(),
      dlogits.f32());
  context.ops->Gemm(LinearInputGradArgs(
      n, config.d_model, experts, dlogits.f32(), FloatOperand(weight), dx,
      /*accumulate=*/true, kernels::GemmPrecision::kFloat32));
  return dlogits;
}

void RouterWeightGradient(const LayerContext& context, int64_t first,
                          int64_t rows, const Tensor& dlogits,
                          const float* x_rows, float* dweight) {
  const ModelConfig& config = *context.config;
  const int64_t experts = config.experts;
  context.ops->Gemm(LinearWeightGradArgs(
      rows, config.d_model, experts, dlogits.f32() + first * experts,
      FloatOperand(x_rows), dweight, kernels::GemmPrecision::kFloat32));
}

}  // namespace plateau::engine
