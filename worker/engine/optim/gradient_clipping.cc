#include "worker/engine/optim/gradient_clipping.h"

#include <cmath>

namespace plateau::engine {

double ClipGradientNorm(kernels::Ops& ops, Tensor& gradients, double max_norm) {
  const double norm =
      std::sqrt(ops.SumOfSquares(gradients.elements(), gradients.f32()));
  // The 1e-6 guards a zero norm, as PyTorch does.
  if (max_norm > 0.0 && norm > max_norm) {
    ops.Scale(gradients.elements(),
              static_cast<float>(max_norm / (norm + 1e-6)), gradients.f32());
  }
  return norm;
}

}  // namespace plateau::engine
