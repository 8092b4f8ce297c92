#include "engine/train/evaluation_rounds.h"

#include <vector>

#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

std::vector<int64_t> Rounds(int64_t windows, int64_t ranks,
                            int64_t rank_sequences) {
  std::vector<int64_t> rounds;
  for (int64_t first = 0; first < windows; first += rounds.back()) {
    rounds.push_back(RoundWindows(first, windows, ranks, rank_sequences));
  }
  return rounds;
}

TEST(EvaluationRoundsTest, FullRoundsThenWhatIsLeft) {
  EXPECT_EQ(Rounds(10, 3, 2), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(Rounds(12, 3, 2), (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(Rounds(5, 1, 2), (std::vector<int64_t>{2, 2, 1}));
}

TEST(EvaluationRoundsTest, ARemainderTooSmallForEveryRankIsARoundOfItsOwn) {
  EXPECT_EQ(Rounds(7, 3, 2), (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(Rounds(14, 3, 2), (std::vector<int64_t>{6, 6, 2}));
}

TEST(EvaluationRoundsTest, SharesAreEqualButForTheFirstRanksOneMore) {
  const int64_t round = 7;
  int64_t next = 0;
  const std::vector<int64_t> counts = {3, 2, 2};
  for (int64_t b = 0; b < 3; ++b) {
    const RoundShare share = RoundShareOf(round, 3, b);
    EXPECT_EQ(share.offset, next) << "rank " << b;
    EXPECT_EQ(share.count, counts[b]) << "rank " << b;
    EXPECT_EQ(share.evaluated, counts[b]) << "rank " << b;
    next += share.count;
  }
  EXPECT_EQ(next, round);
}

TEST(EvaluationRoundsTest, ARankWithoutAWindowRunsOneUncounted) {
  // A round of 1 over 3 ranks: rank 0 counts it; ranks 1 and 2 run one
  // window each that they do not count.
  for (int64_t b = 0; b < 3; ++b) {
    const RoundShare share = RoundShareOf(1, 3, b);
    EXPECT_EQ(share.count, b == 0 ? 1 : 0) << "rank " << b;
    EXPECT_EQ(share.evaluated, 1) << "rank " << b;
  }
}

}  // namespace
}  // namespace plateau::engine
