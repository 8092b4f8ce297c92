// Reading a layer boundary (LayerBoundaryBuffer, model_footprint.h): a
// layer's or the head's input, stored as RoundedActivationType, which the
// reader widens exactly wherever float32 math reads it. The footprints count
// the boundary's bytes by that type, so a boundary of any other type is
// refused.
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

// The norm at the start of a block or the head, of a boundary x that
// CheckBoundaryInput accepted, read as it is: a bf16 x is widened a row at
// a time, with no float32 copy of it, and gives bitwise what its widened
// values give. normed (ProductInputType, the same type as x) =
// RMSNorm(x) . weight; inverse_rms (N) for the backward.
void NormBoundary(const LayerContext& context, const Tensor& x,
                  const float* weight, Tensor* normed, Tensor* inverse_rms);

// Its backward: gradient (ResidualGradientBuffer, the same type as x) +=
// the norm's input gradient from d_normed (N, D); dweight +=.
void AddBoundaryNormGradient(const LayerContext& context, const Tensor& x,
                             const float* weight, const float* inverse_rms,
                             const float* d_normed, Tensor* gradient,
                             float* dweight);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_BOUNDARY_INPUT_H_
