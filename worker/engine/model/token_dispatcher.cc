#include "worker/engine/model/token_dispatcher.h"

#include "common/status_macros.h"

namespace plateau::engine {

absl::Status PlanDispatch(const LayerContext& context,
                          const Tensor& expert_index, DispatchPlan* plan) {
  const ModelConfig& config = *context.config;
  const int64_t copies = context.tokens() * config.top_k;
  ASSIGN_OR_RETURN(
      plan->assignment_row,
      context.Allocate(MemoryComponent::kDispatch, {copies}, DType::kInt32));
  ASSIGN_OR_RETURN(plan->row_token, context.Allocate(MemoryComponent::kDispatch,
                                                     {copies}, DType::kInt32));
  plan->expert_offsets.assign(config.experts + 1, 0);
  context.ops->ComputeExpertLayout(
      context.tokens(), config.experts, config.top_k, expert_index.i32(),
      plan->assignment_row.i32(), plan->row_token.i32(),
      absl::MakeSpan(plan->expert_offsets));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DispatchTokens(const LayerContext& context,
                                      const DispatchPlan& plan,
                                      const float* x) {
  const int64_t copies = context.tokens() * context.config->top_k;
  const int64_t d = context.config->d_model;
  ASSIGN_OR_RETURN(Tensor rows,
                   context.Allocate(MemoryComponent::kDispatch, {copies, d}));
  context.ops->GatherRows(copies, d, x, plan.row_token.i32(), rows.f32());
  return rows;
}

void DispatchTokensBackward(const LayerContext& context,
                            const DispatchPlan& plan, const float* d_rows,
                            float* dx) {
  context.ops->GatherRowsBackward(context.tokens(), context.config->top_k,
                                  context.config->d_model, d_rows,
                                  plan.assignment_row.i32(), dx);
}

void CombineTokens(const LayerContext& context, const DispatchPlan& plan,
                   const Tensor& expert_out, const float* gates,
                   const float* residual, float* out) {
  context.ops->CombineRows(context.tokens(), context.config->top_k,
                           context.config->d_model, expert_out.f32(),
                           plan.assignment_row.i32(), gates, residual, out);
}

absl::StatusOr<Tensor> CombineTokensBackward(const LayerContext& context,
                                             const DispatchPlan& plan,
                                             const Tensor& expert_out,
                                             const float* gates,
                                             const float* dout, float* dgates) {
  const int64_t copies = context.tokens() * context.config->top_k;
  const int64_t d = context.config->d_model;
  ASSIGN_OR_RETURN(Tensor d_rows,
                   context.Allocate(MemoryComponent::kDispatch, {copies, d}));
  context.ops->CombineRowsBackward(context.tokens(), context.config->top_k, d,
                                   expert_out.f32(), plan.assignment_row.i32(),
                                   gates, dout, d_rows.f32(), dgates);
  return d_rows;
}

}  // namespace plateau::engine
