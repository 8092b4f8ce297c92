#include "engine/model/transformer_layer.h"

#include "common/status_macros.h"
#include "engine/model/model_footprint.h"

namespace plateau::engine {

absl::StatusOr<double> TransformerLayerForward(
    const LayerContext& context, const LayerParameters<const float>& w,
    const float* x, float* out, LayerActivations* saved) {
  ASSIGN_OR_RETURN(saved->mid, context.Allocate(ResidualStreamBuffer(
                                   *context.config, context.sequences)));
  RETURN_IF_ERROR(AttentionBlockForward(context, w.attention, x,
                                        saved->mid.f32(), &saved->attention));
  return MoeBlockForward(context, w.moe, saved->mid.f32(), out, &saved->moe);
}

absl::Status TransformerLayerBackward(const LayerContext& context,
                                      const LayerParameters<const float>& w,
                                      const LayerParameters<float>& grads,
                                      const float* x, LayerActivations* saved,
                                      float* dout, float* dx) {
  // The MoE block reads dout to the end and then writes its input's
  // gradient over it (MoeBlockBackward allows dx == dout).
  float* d_mid = dout;
  RETURN_IF_ERROR(MoeBlockBackward(context, w.moe, grads.moe, saved->mid.f32(),
                                   &saved->moe, dout, d_mid));
  saved->mid.Reset();
  return AttentionBlockBackward(context, w.attention, grads.attention, x,
                                &saved->attention, d_mid, dx);
}

}  // namespace plateau::engine
