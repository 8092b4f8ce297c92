#include "engine/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/model_footprint.h"
#include "engine/train/evaluation_rounds.h"
#include "engine/train/stage_links.h"

namespace plateau::engine {

absl::StatusOr<EvaluationResult> EvaluateWindows(Model& model,
                                                 const RankContext& ranks,
                                                 int64_t windows,
                                                 int64_t rank_sequences,
                                                 const WindowSource& window) {
  const int64_t batch_ranks = ranks.batch_ranks();
  if (windows < 1) {
    return absl::InvalidArgumentError(
        "nothing to evaluate: fewer than seq_len + 1 tokens");
  }
  if (rank_sequences < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation needs at least one window per rank and round, got ",
        rank_sequences));
  }
  const int64_t seq_len = model.config().seq_len;
  const int64_t row = seq_len + 1;
  std::vector<int32_t> tokens;
  double weighted_sum = 0.0;
  int64_t round = 0;
  for (int64_t first = 0; first < windows; ++round) {
    const int64_t round_windows =
        RoundWindows(first, windows, batch_ranks, rank_sequences);
    const RoundShare share =
        RoundShareOf(round_windows, batch_ranks, ranks.batch_index());
    const int64_t evaluated = share.evaluated;
    tokens.resize(evaluated * row);
    for (int64_t i = 0; i < share.count; ++i) {
      window(first + share.offset + i, tokens.data() + i * row);
    }
    // A rank with no window of its own runs the round's first, uncounted.
    if (share.count == 0) window(first, tokens.data());
    StageLinks links(
        ranks, BoundaryActivationsBuffer(model.config(), evaluated),
        ResidualGradientBuffer(model.config(), evaluated), &model.allocator());
    const int64_t id = StageLinks::kEvaluationIds + round;
    ASSIGN_OR_RETURN(Tensor input, links.ReceiveForward(id));
    ASSIGN_OR_RETURN(
        StageOutput output,
        model.EvaluateStage(tokens.data(), evaluated, std::move(input)));
    RETURN_IF_ERROR(links.SendForward(output.activations, id));
    if (ranks.last_stage()) weighted_sum += output.cross_entropy * share.count;
    first += round_windows;
  }
  if (ranks.world != nullptr) {
    RETURN_IF_ERROR(ranks.world->AllReduceSum(&weighted_sum, 1));
  }
  EvaluationResult result;
  result.windows = windows;
  result.predicted_tokens = windows * seq_len;
  result.cross_entropy = weighted_sum / static_cast<double>(windows);
  result.perplexity = std::exp(result.cross_entropy);
  return result;
}

}  // namespace plateau::engine
