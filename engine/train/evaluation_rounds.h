// How EvaluateWindows (evaluation.h) deals validation windows out to the
// batch ranks of a stage, round by round: pure arithmetic, shared with the
// memory planner, which sizes a validation round from it.
//
// A round gives every batch rank at most rank_sequences windows, so a
// validation pass never holds more tokens than a training micro-batch: the
// last round takes what is left. Within a round rank b takes an equal
// share, the first (round % ranks) ranks one window more. A rank whose
// share is empty (a last round smaller than the ranks) still runs one
// window through the model, whose loss is not counted, because the round's
// expert all-to-alls and pipeline sends need every rank.
#ifndef PLATEAU_ENGINE_TRAIN_EVALUATION_ROUNDS_H_
#define PLATEAU_ENGINE_TRAIN_EVALUATION_ROUNDS_H_

#include <cstdint>

namespace plateau::engine {

// The windows of the round that starts at window `first` of `windows`.
// REQUIRES: 0 <= first < windows, batch_ranks >= 1, rank_sequences >= 1.
int64_t RoundWindows(int64_t first, int64_t windows, int64_t batch_ranks,
                     int64_t rank_sequences);

// Batch rank b's part of a round of `round_windows`: its first window
// (from the round's start), how many it counts, and how many it runs
// through the model (count, or one uncounted window when count is 0).
struct RoundShare {
  int64_t offset = 0;
  int64_t count = 0;
  int64_t evaluated = 0;
};
RoundShare RoundShareOf(int64_t round_windows, int64_t batch_ranks,
                        int64_t batch_index);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_EVALUATION_ROUNDS_H_
