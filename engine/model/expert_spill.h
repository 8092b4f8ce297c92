// LLEP, the least-loaded half of PipelinedLLEP (docs/ARCHITECTURE.md section
// 2): the borrowers of spilled experts (expert_spill_plan.h) borrow their
// weights for the layer and return their gradients.
#ifndef PLATEAU_ENGINE_MODEL_EXPERT_SPILL_H_
#define PLATEAU_ENGINE_MODEL_EXPERT_SPILL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/expert_spill_plan.h"
#include "engine/model/experts.h"
#include "engine/model/layer_context.h"

namespace plateau::engine {

// The borrowed experts' matrices (or their gradients), laid out as a rank's
// own are: (borrowed, F, D), (borrowed, F, D), (borrowed, D, F); dispatch.
// The weights are as their products read them, in ProductInputType (under
// bf16 products the owner's bf16 weights, stored so or copied for the
// pass: half the bytes to send and hold),
// the gradients float32 (moe_footprint.h, BorrowedWeightsBuffer).
struct BorrowedExperts {
  Tensor w1, w3, w2;

  ExpertParameters<const float> weights() const {
    return {Operand(w1), Operand(w3), Operand(w2)};
  }
  ExpertParameters<float> gradients() { return {w1.f32(), w3.f32(), w2.f32()}; }

 private:
  static LinearOperand Operand(const Tensor& matrices) {
    if (matrices.dtype() == DType::kBfloat16) return {nullptr, matrices.bf16()};
    return FloatOperand(matrices.f32());
  }
};

// Every owner sends the weights of the experts it lends to their borrowers;
// returns what this rank borrowed (empty tensors when nothing).
absl::StatusOr<BorrowedExperts> BorrowExperts(
    const LayerContext& context, const std::vector<ExpertSpill>& spills,
    const ExpertParameters<const float>& own);

// Zeroed gradients for what this rank borrowed.
absl::StatusOr<BorrowedExperts> ZeroBorrowedGradients(
    const LayerContext& context, const std::vector<ExpertSpill>& spills);

// Every borrower returns the gradients of what it borrowed; owners add them
// to their own experts' gradients.
absl::Status ReturnBorrowedGradients(const LayerContext& context,
                                     const std::vector<ExpertSpill>& spills,
                                     BorrowedExperts gradients,
                                     const ExpertParameters<float>& own);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_EXPERT_SPILL_H_
