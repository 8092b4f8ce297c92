#include "engine/train/evaluation_rounds.h"

#include <algorithm>

namespace plateau::engine {

int64_t RoundWindows(int64_t first, int64_t windows, int64_t batch_ranks,
                     int64_t rank_sequences) {
  int64_t round = std::min(batch_ranks * rank_sequences, windows - first);
  const int64_t after = windows - first - round;
  if (after > 0 && after < batch_ranks) round += after;
  return round;
}

RoundShare RoundShareOf(int64_t round_windows, int64_t batch_ranks,
                        int64_t batch_index) {
  const int64_t share = round_windows / batch_ranks;
  const int64_t extra = round_windows % batch_ranks;
  return {batch_index * share + std::min(batch_index, extra),
          share + (batch_index < extra ? 1 : 0)};
}

}  // namespace plateau::engine
