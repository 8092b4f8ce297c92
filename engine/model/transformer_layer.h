// One transformer layer (docs/ARCHITECTURE.md section 8):
//   mid = x + Attn(RMSNorm(x));   out = mid + MoE(RMSNorm(mid)).
#ifndef PLATEAU_ENGINE_MODEL_TRANSFORMER_LAYER_H_
#define PLATEAU_ENGINE_MODEL_TRANSFORMER_LAYER_H_

#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/attention_block.h"
#include "engine/model/layer_context.h"
#include "engine/model/moe_block.h"
#include "engine/model/parameter_layout.h"

namespace plateau::engine {

template <typename T>
struct LayerParameters {
  AttentionParameters<T> attention;
  MoeParameters<T> moe;
};

// Layer `index`'s parameters in a flat buffer laid out by `layout`: the
// weights (their product weights as float32 operands, without a bf16 copy)
// or the gradients; or with product_at(offset) giving the product weights'
// operands (the model's bf16 weight storage).
template <typename T, typename ProductAt>
LayerParameters<T> LayerParametersAt(const ParameterLayout& layout,
                                     int64_t index, T* base,
                                     ProductAt product_at) {
  const LayerOffsets& offsets = layout.layer(index);
  LayerParameters<T> p;
  p.attention.norm = base + offsets.attn_norm;
  p.attention.wqkv = product_at(offsets.wqkv);
  p.attention.wo = product_at(offsets.wo);
  if (offsets.q_norm >= 0) {
    p.attention.q_norm = base + offsets.q_norm;
    p.attention.k_norm = base + offsets.k_norm;
  }
  p.moe.norm = base + offsets.moe_norm;
  p.moe.router = base + offsets.router;
  if (offsets.expert_bias >= 0) p.moe.expert_bias = base + offsets.expert_bias;
  if (offsets.shared_w1 >= 0) {
    p.moe.shared.w1 = product_at(offsets.shared_w1);
    p.moe.shared.w3 = product_at(offsets.shared_w3);
    p.moe.shared.w2 = product_at(offsets.shared_w2);
  }
  p.moe.experts.w1 = product_at(offsets.w1);
  p.moe.experts.w3 = product_at(offsets.w3);
  p.moe.experts.w2 = product_at(offsets.w2);
  return p;
}
template <typename T>
LayerParameters<T> LayerParametersAt(const ParameterLayout& layout,
                                     int64_t index, T* base) {
  return LayerParametersAt(layout, index, base, [base](int64_t offset) {
    return ProductWeightAt(base + offset);
  });
}

struct LayerActivations {
  AttentionActivations attention;
  Tensor mid;  // (N, D)  activations  the residual stream between blocks
  MoeActivations moe;
};

// out = layer(x); fills `saved`; returns the router losses. x is an
// (N, D) boundary (LayerBoundaryBuffer: RoundedActivationType), out one or
// an (N, D) float32 tensor; the layer's math is float32, and a rounded out
// is its float32 sum rounded once. A null out asks only for `saved` (a
// recompute for backward): the MoE block then skips its combine, and with
// chunked dispatch its experts too (its backward recomputes them chunk by
// chunk). keep_saved false says that `saved` is dropped after the call (a
// forward that backward recomputes, or evaluation): a rounded out is then
// summed over saved->mid in place, not in a buffer of its own. REQUIRES:
// out is not x.
absl::StatusOr<RouterLosses> TransformerLayerForward(
    const LayerContext& context, const LayerParameters<const float>& w,
    const Tensor& x, Tensor* out, bool keep_saved, LayerActivations* saved);

// gradient (a ResidualGradientBuffer) = (d layer / dx)^T dout, in place: on
// entry the output's gradient dout, on return the input's; parameter gradients
// accumulated (the rounding of a boundary passes gradients through unchanged).
// Consumes *saved. Both blocks work on the one buffer (the MoE block writes
// the gradient between the blocks over dout), so the residual stream's
// gradient never takes two buffers at the layer's peak.
absl::Status TransformerLayerBackward(const LayerContext& context,
                                      const LayerParameters<const float>& w,
                                      const LayerParameters<float>& grads,
                                      const Tensor& x, LayerActivations* saved,
                                      Tensor* gradient);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_TRANSFORMER_LAYER_H_
