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
struct BorrowedExperts {
  Tensor w1, w3, w2;

  template <typename T>
  ExpertParameters<T> parameters() {
    return {ProductWeightAt(static_cast<T*>(w1.f32())),
            ProductWeightAt(static_cast<T*>(w3.f32())),
            ProductWeightAt(static_cast<T*>(w2.f32()))};
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
