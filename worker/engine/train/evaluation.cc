#include "worker/engine/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/status_macros.h"

namespace plateau::engine {

absl::StatusOr<EvaluationResult> EvaluateWindows(Model& model, int64_t windows,
                                                 int64_t batch_sequences,
                                                 const WindowSource& window) {
  if (windows < 1) {
    return absl::InvalidArgumentError(
        "nothing to evaluate: fewer than seq_len + 1 tokens");
  }
  const int64_t row = model.config().seq_len + 1;
  std::vector<int32_t> tokens;
  double weighted_sum = 0.0;
  for (int64_t first = 0; first < windows; first += batch_sequences) {
    const int64_t count = std::min(batch_sequences, windows - first);
    tokens.resize(count * row);
    for (int64_t i = 0; i < count; ++i) {
      window(first + i, tokens.data() + i * row);
    }
    ASSIGN_OR_RETURN(const double mean, model.Evaluate(tokens.data(), count));
    weighted_sum += mean * count;
  }
  EvaluationResult result;
  result.windows = windows;
  result.predicted_tokens = windows * model.config().seq_len;
  result.cross_entropy = weighted_sum / windows;
  result.perplexity = std::exp(result.cross_entropy);
  return result;
}

}  // namespace plateau::engine
