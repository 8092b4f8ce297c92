// The mixture-of-experts half of a transformer layer, out = x +
// MoE(RMSNorm(x)), as Megatron-Core's stages: router -> dispatch plan ->
// dispatch -> experts -> combine, then the shared experts (if any) over
// every token. Each stage is its own unit; dispatch,
// experts and combine are the model's DispatchStrategy (dispatch_strategy.h:
// whole, or chunked by PipelinedLLEP), so that the memory schedule changes
// nothing else.
#ifndef PLATEAU_ENGINE_MODEL_MOE_BLOCK_H_
#define PLATEAU_ENGINE_MODEL_MOE_BLOCK_H_

#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/dispatch_chunks.h"
#include "engine/model/experts.h"
#include "engine/model/layer_context.h"
#include "engine/model/router.h"
#include "engine/model/shared_experts.h"
#include "engine/model/token_dispatcher.h"

namespace plateau::engine {

template <typename T>
struct MoeParameters {
  T* norm = nullptr;    // (D)
  T* router = nullptr;  // (E, D)
  // (E), with ModelConfig::expert_bias only; its gradient is never written.
  T* expert_bias = nullptr;
  // With ModelConfig::shared_experts only.
  SharedExpertParameters<T> shared;
  ExpertParameters<T> experts;
};

// No normed input RMSNorm(x): backward makes the rows it reads again from
// x and inverse_rms (rms_norm.h's NormInput), bitwise the forward's.
struct MoeActivations {
  Tensor inverse_rms;  // (N)  activations
  RouterActivations routing;
  DispatchPlan plan;
  LoadBalance balance;
  // The whole dispatch: the experts' rows and activations, kept for
  // backward.
  Tensor expert_input;  // (N * K, D)  dispatch  ProductInputType
  ExpertActivations experts;
  Tensor expert_output;  // (N * K, D)  dispatch  ExpertOutputRowsBuffer
  // PipelinedLLEP (config.dispatch_chunk_tokens > 0): only the chunking;
  // backward recomputes each chunk.
  DispatchChunks chunks;
};

// out = x + MoE(RMSNorm(x)), the routed experts' output plus the shared
// experts' (if any); returns the layer's router losses. out
// may alias x only when no backward pass follows (backward reads x). A null
// out fills only `saved`: no combine, and with chunked dispatch no experts.
// REQUIRES: context.dispatch is set.
absl::StatusOr<RouterLosses> MoeBlockForward(
    const LayerContext& context, const MoeParameters<const float>& w,
    const float* x, float* out, MoeActivations* saved);

// gradient (ResidualGradientBuffer) = dout + (d block / dx)^T dout, in
// place: on entry the block output's gradient dout, read to the end, on
// return the input's; including the router losses' gradients (weighted by
// LossWeights::router_losses); parameter gradients accumulate. Consumes
// *saved, freeing each tensor after its last use.
absl::Status MoeBlockBackward(const LayerContext& context,
                              const MoeParameters<const float>& w,
                              const MoeParameters<float>& grads, const float* x,
                              MoeActivations* saved, Tensor* gradient);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_MOE_BLOCK_H_
