// Moves routed token copies to their experts and their outputs back: the
// communication half of the MoE layer, kept apart from expert compute so
// that it can be chunked and overlapped (PipelinedLLEP) and, across ranks,
// become an all-to-all. This is the single-rank dispatcher: rows are
// permuted into expert order in place of an exchange.
#ifndef PLATEAU_WORKER_ENGINE_MODEL_TOKEN_DISPATCHER_H_
#define PLATEAU_WORKER_ENGINE_MODEL_TOKEN_DISPATCHER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/memory/tensor.h"
#include "worker/engine/model/layer_context.h"

namespace plateau::engine {

// Where each of the N * K token copies goes: rows sorted by expert, stable.
struct DispatchPlan {
  Tensor assignment_row;  // (N * K)  dispatch, int32: row of copy (t, j)
  Tensor row_token;       // (N * K)  dispatch, int32: token of each row
  std::vector<int64_t> expert_offsets;  // (E + 1) host: first row per expert

  int64_t tokens_for_expert(int64_t expert) const {
    return expert_offsets[expert + 1] - expert_offsets[expert];
  }
};

absl::Status PlanDispatch(const LayerContext& context,
                          const Tensor& expert_index, DispatchPlan* plan);

// rows[r] = x[row_token[r]]      (N * K, D), dispatch
absl::StatusOr<Tensor> DispatchTokens(const LayerContext& context,
                                      const DispatchPlan& plan, const float* x);

// dx[t] += sum over t's copies of d_rows[copy's row].
void DispatchTokensBackward(const LayerContext& context,
                            const DispatchPlan& plan, const float* d_rows,
                            float* dx);

// out[t] = residual[t] + sum_j gates[t, j] * expert_out[row(t, j)].
void CombineTokens(const LayerContext& context, const DispatchPlan& plan,
                   const Tensor& expert_out, const float* gates,
                   const float* residual, float* out);

// Returns d expert_out (N * K, D), dispatch; writes dgates (N, K).
absl::StatusOr<Tensor> CombineTokensBackward(const LayerContext& context,
                                             const DispatchPlan& plan,
                                             const Tensor& expert_out,
                                             const float* gates,
                                             const float* dout, float* dgates);

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_MODEL_TOKEN_DISPATCHER_H_
