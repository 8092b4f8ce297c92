// The RMSNorm at the start of a block whose products alone read its output
// (attention's, the head's): written in the element type the normed tensor
// was made with (ProductInputType, model_config.h), its statistics in
// float32 either way.
#ifndef PLATEAU_ENGINE_MODEL_RMS_NORM_H_
#define PLATEAU_ENGINE_MODEL_RMS_NORM_H_

#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"

namespace plateau::engine {

// normed (N, D) = RMSNorm(x) . weight; inverse_rms (N) for the backward.
inline void RmsNormForwardInto(const LayerContext& context, const float* x,
                               const float* weight, Tensor* normed,
                               Tensor* inverse_rms) {
  const ModelConfig& config = *context.config;
  if (normed->dtype() == DType::kBfloat16) {
    context.ops->RmsNormForwardToBf16(context.tokens(), config.d_model, x,
                                      weight, config.rms_epsilon,
                                      normed->bf16(), inverse_rms->f32());
    return;
  }
  context.ops->RmsNormForward(context.tokens(), config.d_model, x, weight,
                              config.rms_epsilon, normed->f32(),
                              inverse_rms->f32());
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_RMS_NORM_H_
