// Reading a layer boundary (LayerBoundaryBuffer, model_footprint.h): a
// layer's or the head's input, stored as RoundedActivationType, which the
// reader widens exactly wherever float32 math reads it. The footprints count
// a widening by that type, so a boundary of any other type is refused.
#ifndef PLATEAU_ENGINE_MODEL_BOUNDARY_INPUT_H_
#define PLATEAU_ENGINE_MODEL_BOUNDARY_INPUT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/memory/footprint.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"

namespace plateau::engine {

// INTERNAL, naming `reader`, unless x has a boundary's type.
absl::Status CheckBoundaryInput(const ModelConfig& config, const Tensor& x,
                                absl::string_view reader);

// x's values in float32: x itself, or, when x is bf16, x widened into
// *widened, allocated as `widened_spec` (a float32 buffer of x's size).
absl::StatusOr<const float*> BoundaryValues(const LayerContext& context,
                                            const Tensor& x,
                                            const BufferSpec& widened_spec,
                                            Tensor* widened);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_BOUNDARY_INPUT_H_
