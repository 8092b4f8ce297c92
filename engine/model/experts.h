// The expert bank of a rank: each local expert e maps its rows X_e (the token
// copies routed to it, in segments after dispatch: one per source rank) to
// w2_e (silu(w1_e X) * (w3_e X)). All segments' products run as one grouped
// GEMM per stage, so a skewed routing shares the threads instead of
// serialising on the largest expert; received rows are used where they
// landed, with no permuting copy.
#ifndef PLATEAU_ENGINE_MODEL_EXPERTS_H_
#define PLATEAU_ENGINE_MODEL_EXPERTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"
#include "engine/model/linear.h"
#include "engine/model/token_dispatcher.h"

namespace plateau::engine {

template <typename T>
struct ExpertParameters {
  ProductWeight<T> w1{};  // (local experts, F, D)
  ProductWeight<T> w3{};  // (local experts, F, D)
  ProductWeight<T> w2{};  // (local experts, D, F)
};

// The expert matrices (or their gradients) a rank computes with: its own,
// and during a PipelinedLLEP layer those it borrowed (laid out alike).
template <typename T>
struct ExpertBank {
  ExpertParameters<T> own;
  ExpertParameters<T> borrowed;

  const ExpertParameters<T>& For(const ExpertSegment& segment) const {
    return segment.borrowed ? borrowed : own;
  }
};

// R rows in expert order.
struct ExpertActivations {
  Tensor gate;    // (R, F)  dispatch  w1 x, RoundedActivationType
  Tensor up;      // (R, F)  dispatch  w3 x, RoundedActivationType
  Tensor hidden;  // (R, F)  dispatch  silu(gate) * up, ProductInputType
};

// segments: where each expert's rows are in `input` (R, D), float32 or bf16
// (ExpertInputRowsBuffer).
// Returns the experts' outputs (R, D), dispatch, ExpertOutputRowsBuffer.
// Under bf16 gate, up and the output are each value's float32 product
// rounded once, as the products write them (GemmArgs::c_bf16), and hidden
// is made from the rounded gate and up (SwiGluForwardBf16), which backward
// reads (SwiGluBackwardBf16).
absl::StatusOr<Tensor> ExpertsForward(
    const LayerContext& context, const ExpertBank<const float>& w,
    const std::vector<ExpertSegment>& segments, const Tensor& input,
    ExpertActivations* saved);

// Returns d input (R, D), an ExpertInputGradientRowsBuffer: under bf16 each
// value the float32 sum of its two products rounded once, after every other
// buffer is freed. Accumulates into grads. d_output: an
// ExpertOutputGradientRowsBuffer (float32 or bf16). Consumes the
// forward's tensors and d_output, freeing each after its last use: the peak
// is the saved set plus one stage's gradients, not two full sets.
absl::StatusOr<Tensor> ExpertsBackward(
    const LayerContext& context, const ExpertBank<const float>& w,
    const ExpertBank<float>& grads, const std::vector<ExpertSegment>& segments,
    Tensor input, ExpertActivations saved, Tensor d_output);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_EXPERTS_H_
