#include "engine/model/token_dispatcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/moe_footprint.h"

namespace plateau::engine {
namespace {

bool ExpertParallel(const LayerContext& context) {
  return context.expert_ranks() > 1;
}

// Moves rows of D values (float32, or the experts' bf16 inputs or outputs)
// between the expert ranks: send_rows[r] consecutive rows go to rank r,
// receive_rows[r] come from it; both in rank order.
absl::StatusOr<Tensor> Exchange(const LayerContext& context,
                                const std::vector<int64_t>& send_rows,
                                const std::vector<int64_t>& receive_rows,
                                const Tensor& rows) {
  const int64_t d = context.config->d_model;
  const int64_t row_bytes = d * DTypeBytes(rows.dtype());
  std::vector<int64_t> send_bytes, receive_bytes;
  int64_t received = 0;
  for (size_t r = 0; r < send_rows.size(); ++r) {
    send_bytes.push_back(send_rows[r] * row_bytes);
    receive_bytes.push_back(receive_rows[r] * row_bytes);
    received += receive_rows[r];
  }
  BufferSpec arriving = DispatchRowsBuffer(*context.config, received);
  arriving.dtype = rows.dtype();
  ASSIGN_OR_RETURN(Tensor out, context.Allocate(arriving));
  RETURN_IF_ERROR(context.groups.experts->AllToAllV(rows.data(), send_bytes,
                                                    out.data(), receive_bytes));
  return out;
}

}  // namespace

absl::Status PlanDispatch(const LayerContext& context,
                          const Tensor& expert_index, DispatchPlan* plan) {
  const ModelConfig& config = *context.config;
  const int64_t copies = context.tokens() * config.top_k;
  ASSIGN_OR_RETURN(
      plan->assignment_row,
      context.Allocate(
          MoeBuffers::For(config, context.sequences).assignment_row));
  ASSIGN_OR_RETURN(plan->row_token, context.Allocate(RowTokenBuffer(copies)));
  plan->expert_offsets.assign(config.experts + 1, 0);
  context.ops->ComputeExpertLayout(
      context.tokens(), config.experts, config.top_k, expert_index.i32(),
      plan->assignment_row.i32(), plan->row_token.i32(),
      absl::MakeSpan(plan->expert_offsets));
  plan->local_rows = copies;

  const int ranks = context.expert_ranks();
  const int64_t local = context.shard.expert_count;
  // counts[r][e]: copies for expert e of expert rank r, from this rank.
  std::vector<int64_t> counts(config.experts);
  for (int64_t e = 0; e < config.experts; ++e) {
    counts[e] = plan->expert_offsets[e + 1] - plan->expert_offsets[e];
  }
  // received_counts[r * local + e]: copies for local expert e from rank r.
  std::vector<int64_t> received_counts = counts;  // one rank: ours
  plan->rank_expert_counts.assign(ranks * config.experts, 0);
  std::copy(counts.begin(), counts.end(),
            plan->rank_expert_counts.begin() +
                (ExpertParallel(context) ? context.groups.experts->rank() : 0) *
                    config.experts);
  if (ExpertParallel(context)) {
    // Every rank's counts to every rank (host memory, exact as doubles up
    // to 2^53): rank r's row holds its counts for every expert.
    const int self = context.groups.experts->rank();
    std::vector<double> all_counts(ranks * config.experts, 0.0);
    for (int64_t e = 0; e < config.experts; ++e) {
      all_counts[self * config.experts + e] = static_cast<double>(counts[e]);
    }
    RETURN_IF_ERROR(context.groups.experts->AllReduceSum(
        all_counts.data(), static_cast<int64_t>(all_counts.size())));
    for (size_t i = 0; i < all_counts.size(); ++i) {
      plan->rank_expert_counts[i] = static_cast<int64_t>(all_counts[i]);
    }
    const int64_t first_expert = context.shard.first_expert;
    for (int r = 0; r < ranks; ++r) {
      for (int64_t e = 0; e < local; ++e) {
        received_counts[r * local + e] = static_cast<int64_t>(
            all_counts[r * config.experts + first_expert + e]);
      }
    }
  }
  plan->send_rows.assign(ranks, 0);
  plan->receive_rows.assign(ranks, 0);
  plan->segments.clear();
  plan->received_rows = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int64_t e = 0; e < local; ++e) {
      plan->send_rows[r] += counts[r * local + e];
      const int64_t rows = received_counts[r * local + e];
      plan->segments.push_back({r, e, plan->received_rows, rows});
      plan->receive_rows[r] += rows;
      plan->received_rows += rows;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GatherTokens(const LayerContext& context,
                                    const DispatchPlan& plan, const Tensor& x) {
  const int64_t copies = plan.local_rows;
  const int64_t d = context.config->d_model;
  ASSIGN_OR_RETURN(Tensor rows, context.Allocate(ExpertInputRowsBuffer(
                                    *context.config, copies)));
  if (rows.dtype() != x.dtype()) {
    return absl::InternalError(absl::StrCat(
        "the dispatch gathers ", DTypeName(x.dtype()), " rows into ",
        DTypeName(rows.dtype()), " ones; both follow the products' precision"));
  }
  if (rows.dtype() == DType::kBfloat16) {
    context.ops->GatherRowsBf16(copies, d, x.bf16(), plan.row_token.i32(),
                                rows.bf16());
  } else {
    context.ops->GatherRows(copies, d, x.f32(), plan.row_token.i32(),
                            rows.f32());
  }
  return rows;
}

absl::StatusOr<Tensor> GatherNormedTokens(const LayerContext& context,
                                          const DispatchPlan& plan,
                                          const NormInput& input) {
  const int64_t copies = plan.local_rows;
  const int64_t d = context.config->d_model;
  ASSIGN_OR_RETURN(Tensor rows, context.Allocate(ExpertInputRowsBuffer(
                                    *context.config, copies)));
  if (rows.dtype() == DType::kBfloat16) {
    context.ops->GatherRmsNormedRowsToBf16(copies, d, input.x,
                                           input.inverse_rms, input.weight,
                                           plan.row_token.i32(), rows.bf16());
  } else {
    context.ops->GatherRmsNormedRows(copies, d, input.x, input.inverse_rms,
                                     input.weight, plan.row_token.i32(),
                                     rows.f32());
  }
  return rows;
}

void GatherTokensBackward(const LayerContext& context, const DispatchPlan& plan,
                          const Tensor& d_rows, float* dx) {
  const int64_t tokens = context.tokens();
  const int64_t top_k = context.config->top_k;
  const int64_t d = context.config->d_model;
  if (d_rows.dtype() == DType::kBfloat16) {
    context.ops->GatherRowsBackwardBf16(tokens, top_k, d, d_rows.bf16(),
                                        plan.assignment_row.i32(), dx);
  } else {
    context.ops->GatherRowsBackward(tokens, top_k, d, d_rows.f32(),
                                    plan.assignment_row.i32(), dx);
  }
}

absl::StatusOr<Tensor> SendToExperts(const LayerContext& context,
                                     const DispatchPlan& plan, Tensor rows) {
  if (!ExpertParallel(context)) return rows;
  return Exchange(context, plan.send_rows, plan.receive_rows, rows);
}

absl::StatusOr<Tensor> ReturnFromExperts(const LayerContext& context,
                                         const DispatchPlan& plan,
                                         Tensor rows) {
  if (!ExpertParallel(context)) return rows;
  return Exchange(context, plan.receive_rows, plan.send_rows, rows);
}

void CombineTokens(const LayerContext& context, const DispatchPlan& plan,
                   const Tensor& expert_out, const float* gates,
                   const float* residual, float* out) {
  const int64_t tokens = context.tokens();
  const int64_t top_k = context.config->top_k;
  const int64_t d = context.config->d_model;
  if (expert_out.dtype() == DType::kBfloat16) {
    context.ops->CombineRowsBf16(tokens, top_k, d, expert_out.bf16(),
                                 plan.assignment_row.i32(), gates, residual,
                                 out);
  } else {
    context.ops->CombineRows(tokens, top_k, d, expert_out.f32(),
                             plan.assignment_row.i32(), gates, residual, out);
  }
}

absl::StatusOr<Tensor> CombineTokensBackward(const LayerContext& context,
                                             const DispatchPlan& plan,
                                             const Tensor& expert_out,
                                             const float* gates,
                                             const Tensor& dout,
                                             float* dgates) {
  const int64_t copies = plan.local_rows;
  const int64_t d = context.config->d_model;
  // bf16 exactly when expert_out and dout are: all three follow the
  // products' precision.
  if (dout.dtype() != expert_out.dtype()) {
    return absl::InternalError(absl::StrCat(
        "the combine's backward got the experts' outputs in ",
        DTypeName(expert_out.dtype()), " but the tokens' gradient in ",
        DTypeName(dout.dtype()), "; both follow the products' precision"));
  }
  ASSIGN_OR_RETURN(Tensor d_rows,
                   context.Allocate(ExpertOutputGradientRowsBuffer(
                       *context.config, copies)));
  if (expert_out.dtype() == DType::kBfloat16) {
    context.ops->CombineRowsBackwardBf16(
        context.tokens(), context.config->top_k, d, expert_out.bf16(),
        plan.assignment_row.i32(), gates, dout.bf16(), d_rows.bf16(), dgates);
  } else {
    context.ops->CombineRowsBackward(
        context.tokens(), context.config->top_k, d, expert_out.f32(),
        plan.assignment_row.i32(), gates, dout.f32(), d_rows.f32(), dgates);
  }
  return d_rows;
}

}  // namespace plateau::engine
