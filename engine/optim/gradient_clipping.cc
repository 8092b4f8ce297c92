#include "engine/optim/gradient_clipping.h"

namespace plateau::engine {

float GradientClipFactor(double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0f;
  // The 1e-6 guards a zero norm, as PyTorch does.
  return static_cast<float>(max_norm / (norm + 1e-6));
}

}  // namespace plateau::engine
