// The MoE router (gating): probabilities p = softmax(x Wr^T) over experts,
// the top_k experts of each token with gates renormalised to sum to one, and
// the load-balancing loss aux = coefficient * experts * sum_e f_e P_e, where
// f_e is the fraction of token copies routed to e and P_e the mean
// probability of e (docs/ARCHITECTURE.md section 8), both over the whole
// micro-batch: the tokens of every rank of the batch group.
#ifndef PLATEAU_ENGINE_MODEL_ROUTER_H_
#define PLATEAU_ENGINE_MODEL_ROUTER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"

namespace plateau::engine {

struct RouterActivations {
  Tensor probs;         // (N, E)  activations
  Tensor expert_index;  // (N, K)  activations, int32, by descending prob
  Tensor gates;         // (N, K)  activations
};

struct LoadBalance {
  // (E) copies routed to each expert over the batch group: the load each
  // expert actually receives.
  std::vector<int64_t> tokens_per_expert;
  double aux_loss = 0.0;
  // d aux / d probs[t, e], the same for every token t.    (E)
  std::vector<float> dprobs_per_expert;
};

absl::Status RouteTokens(const LayerContext& context, const float* weight,
                         const float* x, RouterActivations* routing);

// tokens_per_expert: (E) this rank's counts (from the dispatch plan); they
// and the probability sums are summed over the batch group.
absl::StatusOr<LoadBalance> ComputeLoadBalance(
    const LayerContext& context, const RouterActivations& routing,
    const std::vector<int64_t>& tokens_per_expert);

// From the gates' gradient dgates (N, K) and the load-balancing loss:
// dweight += dlogits^T x, dx += dlogits . weight.
absl::Status RouterBackward(const LayerContext& context, const float* weight,
                            float* dweight, const float* x,
                            const RouterActivations& routing,
                            const float* dgates, const LoadBalance& balance,
                            float* dx);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_ROUTER_H_
