// Under bf16 products (ModelConfig::matmul_precision), the bf16 copies of
// weight matrices that a pass's products read: each pass over a layer (or
// the output head) rounds that layer's product weights (to nearest even)
// once into a buffer of its own, shared by every product of the pass (the
// forward, or a backward with its recompute) and by every chunk of a
// PipelinedLLEP dispatch, instead of once in every product. The products
// read the copy in place. Products take the rounded values either way, so
// the loss and gradients are bitwise the same; the copy lives for the pass
// only (one layer's matrices in bf16, component `weights`), and the
// float32 weights stay the only lasting copy: what optimizers update and
// checkpoints save.
#ifndef PLATEAU_ENGINE_MODEL_COMPUTE_WEIGHTS_H_
#define PLATEAU_ENGINE_MODEL_COMPUTE_WEIGHTS_H_

#include <array>
#include <cstdint>
#include <functional>

#include "engine/model/linear.h"

namespace plateau::engine {

class ComputeWeights {
 public:
  // A pass copies one layer's matrices, in up to three ranges (attention's,
  // the shared experts', the routed experts'), or the head's.
  static constexpr int kMostRanges = 3;

  // float32 weights [weights, weights + elements) are at `bf16` in bf16.
  // REQUIRES: fewer than kMostRanges added so far.
  void Add(const float* weights, int64_t elements, const uint16_t* bf16) {
    ranges_.at(range_count_++) = {weights, elements, bf16};
  }

  // The matrix at `matrix` as a product's operand: its float32 values,
  // with its bf16 copy where a range covers it (a borrowed expert's matrix
  // has none, nor has any under fp32 products). Both backends read the
  // copy where there is one (kernels::GemmArgs::b_bf16).
  LinearOperand Of(const float* matrix) const {
    const std::less<const float*> before;
    for (int i = 0; i < range_count_; ++i) {
      const Range& range = ranges_[i];
      if (!before(matrix, range.weights) &&
          before(matrix, range.weights + range.elements)) {
        return {matrix, range.bf16 + (matrix - range.weights)};
      }
    }
    return FloatOperand(matrix);
  }

 private:
  struct Range {
    const float* weights = nullptr;
    int64_t elements = 0;
    const uint16_t* bf16 = nullptr;
  };
  std::array<Range, kMostRanges> ranges_;
  int range_count_ = 0;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_COMPUTE_WEIGHTS_H_
