// How EvaluateWindows (evaluation.h) deals validation windows out to the
// batch ranks of a stage, round by round: pure arithmetic, shared with the
// memory planner, which sizes a validation round from it.
//
// A round gives every batch rank rank_sequences windows; a remainder too
// small to give every rank one window joins the round before it. Within a
// round rank b takes an equal share, the first (round % ranks) ranks one
// window more.
#ifndef PLATEAU_ENGINE_TRAIN_EVALUATION_ROUNDS_H_
#define PLATEAU_ENGINE_TRAIN_EVALUATION_ROUNDS_H_

#include <cstdint>

namespace plateau::engine {

// The windows of the round that starts at window `first` of `windows`.
// REQUIRES: 0 <= first < windows, batch_ranks >= 1, rank_sequences >= 1.
int64_t RoundWindows(int64_t first, int64_t windows, int64_t batch_ranks,
                     int64_t rank_sequences);

// Batch rank b's part of a round of `round_windows`: its first window
// (from the round's start) and how many.
struct RoundShare {
  int64_t offset = 0;
  int64_t count = 0;
};
RoundShare RoundShareOf(int64_t round_windows, int64_t batch_ranks,
                        int64_t batch_index);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_EVALUATION_ROUNDS_H_
