// Mean next-token cross-entropy of a model over windows of seq_len + 1
// tokens (tokens[0..seq_len) predict tokens[1..seq_len]), evaluated a batch
// of windows at a time. Used for validation during training and by `eval`.
//
// Over several ranks every rank calls it with the same arguments: each
// round gives every batch rank of a stage a share of the next windows (as
// equal as can be, never more than rank_sequences; ranks of one pipeline
// the same share; evaluation_rounds.h), activations flow down the
// pipeline, and the last stages' sums are added over the world. Every
// window counts once, so the result is the one-rank result up to float
// rounding, whatever the layout, and no round holds more tokens on a rank
// than a training micro-batch of rank_sequences.
#ifndef PLATEAU_ENGINE_TRAIN_EVALUATION_H_
#define PLATEAU_ENGINE_TRAIN_EVALUATION_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/train/rank_context.h"

namespace plateau::engine {

struct EvaluationResult {
  double cross_entropy = 0.0;  // nats per predicted token
  double perplexity = 0.0;     // exp(cross_entropy)
  int64_t windows = 0;
  int64_t predicted_tokens = 0;
};

// Fills out[seq_len + 1] with window `index`.
using WindowSource = std::function<void(int64_t index, int32_t* out)>;

// rank_sequences: at most this many windows per rank and round.
// INVALID_ARGUMENT when there is no window.
absl::StatusOr<EvaluationResult> EvaluateWindows(Model& model,
                                                 const RankContext& ranks,
                                                 int64_t windows,
                                                 int64_t rank_sequences,
                                                 const WindowSource& window);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_EVALUATION_H_
