#include "engine/optim/learning_rate.h"

#include <algorithm>
#include <cmath>

namespace plateau::engine {

float LearningRateAt(int64_t step, int64_t total_steps, float peak,
                     int64_t warmup_steps) {
  constexpr double kFinalFraction = 0.1;
  if (step <= warmup_steps) {
    return static_cast<float>(peak * static_cast<double>(step) /
                              static_cast<double>(warmup_steps));
  }
  const int64_t decay_steps = std::max<int64_t>(total_steps - warmup_steps, 1);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(peak *
                            (kFinalFraction + (1.0 - kFinalFraction) * cosine));
}

}  // namespace plateau::engine
