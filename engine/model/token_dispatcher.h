// Moves routed token copies to their experts and their outputs back: the
// communication half of the MoE layer, kept apart from expert compute so
// that it can be chunked and overlapped (PipelinedLLEP).
//
// A rank first sorts its token copies by expert (the "local" order). With
// expert parallelism the copies for each expert rank's experts are then
// exchanged with an all-to-all-v, the counts exchanged first; a rank's
// experts see their rows in the "received" order: by source rank, then by
// expert. Without it the two orders are the same and nothing moves.
#ifndef PLATEAU_ENGINE_MODEL_TOKEN_DISPATCHER_H_
#define PLATEAU_ENGINE_MODEL_TOKEN_DISPATCHER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {

// Rows of one expert from one source rank, in the received order. The
// expert is local_expert of this rank's own experts, or with `borrowed` of
// those it borrowed for the layer (PipelinedLLEP's spill).
struct ExpertSegment {
  int source = 0;
  int64_t local_expert = 0;
  int64_t first_row = 0;
  int64_t rows = 0;
  bool borrowed = false;
};

struct DispatchPlan {
  Tensor assignment_row;  // (N * K)  dispatch, int32: local row of (t, j)
  Tensor row_token;       // (local rows)  dispatch, int32: token of a row
  int64_t local_rows = 0;
  // (E + 1) host: first local row of every expert of the whole model (a
  // whole plan's; a chunk's rows are not grouped by expert).
  std::vector<int64_t> expert_offsets;
  // (expert ranks x E) host: the copies each expert rank routed to each
  // expert of the whole model, the same on every rank.
  std::vector<int64_t> rank_expert_counts;
  std::vector<int64_t> send_rows;     // (expert ranks) local rows to each
  std::vector<int64_t> receive_rows;  // (expert ranks) rows from each
  int64_t received_rows = 0;
  // Every (source, local expert) block of the received rows, in order.
  std::vector<ExpertSegment> segments;
};

// Sorts the copies by expert and, with expert parallelism, exchanges the
// counts.
absl::Status PlanDispatch(const LayerContext& context,
                          const Tensor& expert_index, DispatchPlan* plan);

// rows[r] = x[row_token[r]]: the copies in local order    (N * K, D), in
// the experts' input type (ExpertInputRowsBuffer: bf16 under bf16
// products), which is x's (MoeBuffers::normed).
absl::StatusOr<Tensor> GatherTokens(const LayerContext& context,
                                    const DispatchPlan& plan, const Tensor& x);
// GatherTokens of RMSNorm(input.x) . input.weight, each row normalized as it
// is gathered with the saved statistics: bitwise GatherTokens of the
// forward's normed tensor, which a backward need not keep.
absl::StatusOr<Tensor> GatherNormedTokens(const LayerContext& context,
                                          const DispatchPlan& plan,
                                          const NormInput& input);
// dx[t] += sum over t's copies of d_rows[copy's row] (local order); d_rows
// an ExpertInputGradientRowsBuffer (float32 or bf16).
void GatherTokensBackward(const LayerContext& context, const DispatchPlan& plan,
                          const Tensor& d_rows, float* dx);

// Local order -> received order (to the experts' ranks); moves nothing
// without expert parallelism.
absl::StatusOr<Tensor> SendToExperts(const LayerContext& context,
                                     const DispatchPlan& plan, Tensor rows);
// Received order -> local order (back to the tokens' ranks).
absl::StatusOr<Tensor> ReturnFromExperts(const LayerContext& context,
                                         const DispatchPlan& plan, Tensor rows);

// out[t] = residual[t] + sum_j gates[t, j] * expert_out[row(t, j)], with
// expert_out in local order; out may alias residual.
void CombineTokens(const LayerContext& context, const DispatchPlan& plan,
                   const Tensor& expert_out, const float* gates,
                   const float* residual, float* out);

// Returns d expert_out (N * K, D) in local order, an
// ExpertOutputGradientRowsBuffer (bf16 under bf16 products), from dout (N,
// D), a ResidualGradientBuffer; writes dgates (N, K).
absl::StatusOr<Tensor> CombineTokensBackward(const LayerContext& context,
                                             const DispatchPlan& plan,
                                             const Tensor& expert_out,
                                             const float* gates,
                                             const Tensor& dout, float* dgates);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_TOKEN_DISPATCHER_H_
