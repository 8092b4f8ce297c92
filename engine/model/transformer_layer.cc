#include "engine/model/transformer_layer.h"

#include "common/status_macros.h"
#include "engine/model/model_footprint.h"

namespace plateau::engine {

absl::StatusOr<RouterLosses> TransformerLayerForward(
    const LayerContext& context, const LayerParameters<const float>& w,
    const Tensor& x, Tensor* out, bool keep_saved, LayerActivations* saved) {
  const BufferSpec residual_stream =
      ResidualStreamBuffer(*context.config, context.sequences);
  ASSIGN_OR_RETURN(saved->mid, context.Allocate(residual_stream));
  RETURN_IF_ERROR(AttentionBlockForward(context, w.attention, x,
                                        saved->mid.f32(), &saved->attention));
  float* mid = saved->mid.f32();
  if (out == nullptr || out->dtype() == DType::kFloat32) {
    return MoeBlockForward(context, w.moe, mid,
                           out == nullptr ? nullptr : out->f32(), &saved->moe);
  }
  // A rounded boundary: the float32 sum, then rounded once.
  Tensor sum;
  if (keep_saved) {
    ASSIGN_OR_RETURN(sum, context.Allocate(residual_stream));
  }
  float* sum_values = keep_saved ? sum.f32() : mid;
  ASSIGN_OR_RETURN(
      const RouterLosses losses,
      MoeBlockForward(context, w.moe, mid, sum_values, &saved->moe));
  context.ops->CopyToBf16(out->elements(), sum_values, out->bf16());
  return losses;
}

absl::Status TransformerLayerBackward(const LayerContext& context,
                                      const LayerParameters<const float>& w,
                                      const LayerParameters<float>& grads,
                                      const Tensor& x, LayerActivations* saved,
                                      Tensor* gradient) {
  // The MoE block reads dout to the end and then writes its input's
  // gradient over it.
  RETURN_IF_ERROR(MoeBlockBackward(context, w.moe, grads.moe, saved->mid.f32(),
                                   &saved->moe, gradient));
  saved->mid.Reset();
  return AttentionBlockBackward(context, w.attention, grads.attention, x,
                                &saved->attention, gradient);
}

}  // namespace plateau::engine
