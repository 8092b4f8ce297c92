// The top of the model: final RMSNorm, then the vocabulary projection
// (lm_head) and the mean next-token cross-entropy by the model's
// HeadStrategy (head_strategy.h: plain, or Ring-DTP).
#ifndef PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_H_
#define PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_H_

#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/head_strategy.h"
#include "engine/model/layer_context.h"
#include "engine/model/parameter_layout.h"

namespace plateau::engine {

// Returns the mean cross-entropy of predicting targets (N, int32) from x
// over this micro-batch. x: (N, D), the last layer's output (a boundary:
// RoundedActivationType, which the head's norm reads as it is:
// NormBoundary, boundary_input.h).
// REQUIRES: context.head is set.
absl::StatusOr<double> OutputHeadForward(
    const LayerContext& context, const OutputHeadParameters<const float>& w,
    const Tensor& x, const Tensor& targets, OutputHeadActivations* saved);

// dx (N, D), a ResidualGradientBuffer = gradient w.r.t. x of the
// cross-entropy weighted by loss_weights.cross_entropy_per_token (written,
// rounded once under bf16; the rounding of x passes it through unchanged);
// parameter gradients accumulate. Consumes saved->logits (turned into their
// gradient) in the plain form.
absl::Status OutputHeadBackward(const LayerContext& context,
                                const OutputHeadParameters<const float>& w,
                                const OutputHeadParameters<float>& grads,
                                const Tensor& x, const Tensor& targets,
                                OutputHeadActivations* saved, Tensor* dx);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_H_
