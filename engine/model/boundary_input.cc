#include "engine/model/boundary_input.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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

absl::StatusOr<const float*> BoundaryValues(const LayerContext& context,
                                            const Tensor& x,
                                            const BufferSpec& widened_spec,
                                            Tensor* widened) {
  if (x.dtype() != DType::kBfloat16) return x.f32();
  ASSIGN_OR_RETURN(*widened, context.Allocate(widened_spec));
  context.ops->CopyFromBf16(x.elements(), x.bf16(), widened->f32());
  return widened->f32();
}

}  // namespace plateau::engine
