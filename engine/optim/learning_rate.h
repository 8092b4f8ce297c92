// The learning-rate schedule: linear warmup from 0 to the peak over
// warmup_steps, then cosine decay to a tenth of the peak at the last step.
#ifndef PLATEAU_ENGINE_OPTIM_LEARNING_RATE_H_
#define PLATEAU_ENGINE_OPTIM_LEARNING_RATE_H_

#include <cstdint>

namespace plateau::engine {

// step: 1-based update number; total_steps >= 1.
float LearningRateAt(int64_t step, int64_t total_steps, float peak,
                     int64_t warmup_steps);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_LEARNING_RATE_H_
