// How a MoE layer's routed copies reach their experts and come back, after
// the router and the dispatch plan (moe_block.h). Two forms, one chosen per
// model from the config (DispatchStrategyFor):
// - whole (config.dispatch_chunk_tokens == 0): every copy at once, the
//   experts' rows and activations kept for backward;
// - chunked, PipelinedLLEP (dispatch_chunk_tokens > 0): K chunks of at most
//   the cap per pair of ranks, with the LLEP spill (dispatch_chunks.h,
//   pipelined_experts.h); only the chunking is kept, and backward
//   recomputes each chunk.
#ifndef PLATEAU_ENGINE_MODEL_DISPATCH_STRATEGY_H_
#define PLATEAU_ENGINE_MODEL_DISPATCH_STRATEGY_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/experts.h"
#include "engine/model/layer_context.h"
#include "engine/model/model_config.h"
#include "engine/model/moe_block.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {

class DispatchStrategy {
 public:
  virtual ~DispatchStrategy() = default;

  // From the normed input (N, D, MoeBuffers::normed) and saved's routing
  // and plan: out = x +
  // the gated sum of each token's experts' outputs. A null out asks only
  // for what backward needs (the chunked form then runs no experts).
  virtual absl::Status Forward(const LayerContext& context,
                               const ExpertParameters<const float>& w,
                               const Tensor& normed, const float* x, float* out,
                               MoeActivations* saved) const = 0;
  // Returns the gradient with respect to the normed input through the
  // experts (N, D), from the block output's gradient dout
  // (ResidualGradientBuffer) and the input given by its parts (the chunked
  // form gathers its rows again); writes d_gates (N, K); the experts'
  // gradients accumulate. Consumes what the forward kept of the dispatch.
  virtual absl::StatusOr<Tensor> Backward(
      const LayerContext& context, const ExpertParameters<const float>& w,
      const ExpertParameters<float>& grads, const NormInput& normed,
      const Tensor& dout, float* d_gates, MoeActivations* saved) const = 0;
};

// The whole dispatch without a chunk cap, PipelinedLLEP with one.
const DispatchStrategy& DispatchStrategyFor(const ModelConfig& config);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_DISPATCH_STRATEGY_H_
