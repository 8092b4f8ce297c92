#include "engine/model/boundary_input.h"

#include "absl/strings/str_cat.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {

absl::Status CheckBoundaryInput(const ModelConfig& config, const Tensor& x,
                                absl::string_view reader) {
  const DType expected = RoundedActivationType(config);
  if (x.dtype() != expected) {
    return absl::InternalError(
        absl::StrCat(reader, "'s input is ", DTypeName(x.dtype()),
                     "; a layer boundary is ", DTypeName(expected)));
  }
  return absl::OkStatus();
}

void NormBoundary(const LayerContext& context, const Tensor& x,
                  const float* weight, Tensor* normed, Tensor* inverse_rms) {
  if (x.dtype() != DType::kBfloat16) {
    RmsNormForwardInto(context, x.f32(), weight, normed, inverse_rms);
    return;
  }
  const ModelConfig& config = *context.config;
  context.ops->RmsNormForwardBf16(context.tokens(), config.d_model, x.bf16(),
                                  weight, config.rms_epsilon, normed->bf16(),
                                  inverse_rms->f32());
}

void AddBoundaryNormGradient(const LayerContext& context, const Tensor& x,
                             const float* weight, const float* inverse_rms,
                             const float* d_normed, Tensor* gradient,
                             float* dweight) {
  if (x.dtype() != DType::kBfloat16) {
    AddNormGradient(context, x.f32(), weight, inverse_rms, d_normed, gradient,
                    dweight);
    return;
  }
  context.ops->RmsNormBackwardBf16(context.tokens(), context.config->d_model,
                                   x.bf16(), weight, inverse_rms, d_normed,
                                   gradient->bf16(), dweight);
}

}  // namespace plateau::engine
