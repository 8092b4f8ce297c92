#include "engine/train/evaluation_rounds.h"

#include <algorithm>

namespace plateau::engine {

int64_t RoundWindows(int64_t first, int64_t windows, int64_t batch_ranks,
                     int64_t rank_sequences) {
  return std::min(batch_ranks * rank_sequences, windows - first);
}

RoundShare RoundShareOf(int64_t round_windows, int64_t batch_ranks,
                        int64_t batch_index) {
  const int64_t share = round_windows / batch_ranks;
  const int64_t extra = round_windows % batch_ranks;
  RoundShare result;
  result.offset = batch_index * share + std::min(batch_index, extra);
  result.count = share + (batch_index < extra ? 1 : 0);
  result.evaluated = std::max<int64_t>(result.count, 1);
  return result;
}

}  // namespace plateau::engine
