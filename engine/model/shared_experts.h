// The shared experts of an MoE layer (ModelConfig::shared_experts): one
// SwiGLU of shared_hidden() units that every token passes through,
//   out += w2 (silu(w1 x) * (w3 x)),
// x the MoE block's normed input. They keep nothing for backward: the
// forward runs kSharedExpertPieceTokens tokens at a time, and the backward
// makes each piece's normed input, gate and up again from the block's
// input, so the block's peak grows by one piece's buffers
// (SharedExpertBuffers), never by tokens x shared_hidden. The pieces are the
// same whatever the schedules, so every schedule computes them bitwise alike.
#ifndef PLATEAU_ENGINE_MODEL_SHARED_EXPERTS_H_
#define PLATEAU_ENGINE_MODEL_SHARED_EXPERTS_H_

#include "absl/status/status.h"
#include "engine/model/layer_context.h"
#include "engine/model/linear.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {

template <typename T>
struct SharedExpertParameters {
  ProductWeight<T> w1{};  // (H, D)
  ProductWeight<T> w3{};  // (H, D)
  ProductWeight<T> w2{};  // (D, H)
};

// out (N, D) float32 += the shared experts' output for normed (N, D,
// MoeBuffers::normed: ProductInputType).
absl::Status SharedExpertsForward(const LayerContext& context,
                                  const SharedExpertParameters<const float>& w,
                                  const Tensor& normed, float* out);

// d_normed (N, D) += (d out / d normed)^T dout, the normed input given by
// its parts, dout a ResidualGradientBuffer; the weight gradients accumulate
// into grads.
absl::Status SharedExpertsBackward(const LayerContext& context,
                                   const SharedExpertParameters<const float>& w,
                                   const SharedExpertParameters<float>& grads,
                                   const NormInput& normed, const Tensor& dout,
                                   float* d_normed);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_SHARED_EXPERTS_H_
