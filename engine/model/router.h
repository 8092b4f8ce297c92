// The MoE router (gating): probabilities p = softmax(x Wr^T) over experts,
// or with the sigmoid router (DeepSeek-V3) scores s = sigmoid(x Wr^T) and
// p = s / sum_e s; the top_k experts of each token (by p or s, or with
// aux-loss-free balancing by p or s plus the expert's bias) with gates,
// their p, renormalised to sum to one, and
// the router's losses (docs/ARCHITECTURE.md section 8), both over the whole
// micro-batch, the tokens of every rank of the batch group:
//   - load balancing, aux = coefficient * experts * sum_e f_e P_e, where f_e
//     is the fraction of token copies routed to e and P_e the mean
//     probability of e;
//   - with a z-loss coefficient, z = coefficient * mean_t lse_t^2, lse_t the
//     logsumexp of token t's router logits (ST-MoE's router z-loss).
#ifndef PLATEAU_ENGINE_MODEL_ROUTER_H_
#define PLATEAU_ENGINE_MODEL_ROUTER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {

struct RouterActivations {
  Tensor probs;         // (N, E)  activations
  Tensor expert_index;  // (N, K)  activations, int32, by descending prob
  Tensor gates;         // (N, K)  activations
  Tensor logsumexp;     // (N)     activations, with a z-loss only
  Tensor score_sums;    // (N)     activations, with the sigmoid router only
};

// The router's losses of a layer, or summed over layers.
struct RouterLosses {
  double load_balancing = 0.0;
  double z_loss = 0.0;
  RouterLosses& operator+=(const RouterLosses& other) {
    load_balancing += other.load_balancing;
    z_loss += other.z_loss;
    return *this;
  }
};

struct LoadBalance {
  // (E) copies routed to each expert over the batch group: the load each
  // expert actually receives.
  std::vector<int64_t> tokens_per_expert;
  RouterLosses losses;
  // d aux / d probs[t, e], the same for every token t.    (E)
  std::vector<float> dprobs_per_expert;
  // d z / d lse_t = z_loss_scale * lse_t for each of this rank's tokens,
  // weighted as the loss is (LossWeights::router_losses).
  float z_loss_scale = 0.0f;
};

// Routes the block's normed input, `normed` (MoeBuffers::normed) given
// also by its parts: the logits are float32 products of float32 rows,
// normed's own, or under bf16 its rows made again from `input` a piece at a
// time (bitwise the float32 rows the norm made before rounding them).
// expert_bias: (E), added to the probabilities for the choice of experts
// only (aux-loss-free balancing), or null.
absl::Status RouteTokens(const LayerContext& context, const float* weight,
                         const float* expert_bias, const Tensor& normed,
                         const NormInput& input, RouterActivations* routing);

// tokens_per_expert: (E) this rank's counts (from the dispatch plan); they
// and the probability sums are summed over the batch group.
absl::StatusOr<LoadBalance> ComputeLoadBalance(
    const LayerContext& context, const RouterActivations& routing,
    const std::vector<int64_t>& tokens_per_expert);

// From the gates' gradient dgates (N, K) and the load-balancing loss:
// returns the logits' gradient dlogits (N, E) and adds dx += dlogits .
// weight. The weight's gradient is RouterWeightGradient's, which reads the
// router's input.
absl::StatusOr<Tensor> RouterBackward(const LayerContext& context,
                                      const float* weight,
                                      const RouterActivations& routing,
                                      const float* dgates,
                                      const LoadBalance& balance, float* dx);

// dweight += dlogits[first, first + rows)^T x_rows, x_rows (rows, D) the
// router's input's rows [first, first + rows): the whole input at once or a
// piece at a time.
void RouterWeightGradient(const LayerContext& context, int64_t first,
                          int64_t rows, const Tensor& dlogits,
                          const float* x_rows, float* dweight);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_ROUTER_H_
