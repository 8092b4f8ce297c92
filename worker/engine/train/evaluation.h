// Mean next-token cross-entropy of a model over windows of seq_len + 1
// tokens (tokens[0..seq_len) predict tokens[1..seq_len]), evaluated a batch
// of windows at a time. Used for validation during training and by `eval`.
#ifndef PLATEAU_WORKER_ENGINE_TRAIN_EVALUATION_H_
#define PLATEAU_WORKER_ENGINE_TRAIN_EVALUATION_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "worker/engine/model/model.h"

namespace plateau::engine {

struct EvaluationResult {
  double cross_entropy = 0.0;  // nats per predicted token
  double perplexity = 0.0;     // exp(cross_entropy)
  int64_t windows = 0;
  int64_t predicted_tokens = 0;
};

// Fills out[seq_len + 1] with window `index`.
using WindowSource = std::function<void(int64_t index, int32_t* out)>;

// INVALID_ARGUMENT when windows < 1.
absl::StatusOr<EvaluationResult> EvaluateWindows(Model& model, int64_t windows,
                                                 int64_t batch_sequences,
                                                 const WindowSource& window);

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_TRAIN_EVALUATION_H_
