#include "engine/model/expert_spill.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

// Copies each expert rank receives once the spills are applied.
std::vector<int64_t> RankLoads(const std::vector<int64_t>& counts, int ranks,
                               int64_t experts,
                               const std::vector<ExpertSpill>& spills) {
  const int64_t local = experts / ranks;
  std::vector<int64_t> loads(ranks, 0);
  for (int s = 0; s < ranks; ++s) {
    for (int64_t e = 0; e < experts; ++e) {
      loads[e / local] += counts[s * experts + e];
    }
  }
  for (const ExpertSpill& spill : spills) {
    for (int s = 0; s < ranks; ++s) {
      EXPECT_LE(spill.copies[s], counts[s * experts + spill.expert]);
      loads[spill.owner] -= spill.copies[s];
      loads[spill.borrower] += spill.copies[s];
    }
  }
  return loads;
}

TEST(ExpertSpillTest, BalancedRoutingSpillsNothing) {
  EXPECT_TRUE(PlanExpertSpill({10, 12, 11, 9, 10, 11, 12, 10}, 2, 4).empty());
  EXPECT_TRUE(PlanExpertSpill({500, 0, 3}, 1, 3).empty());  // one rank
}

TEST(ExpertSpillTest, SkewedRoutingMovesTheExcessToTheIdlestRank) {
  // Both sources send 40 copies to expert 1: rank 0 would receive 100 of
  // the 120 copies, rank 1 only 20.
  const std::vector<int64_t> counts = {10, 40, 10, 0, 10, 40, 10, 0};
  const std::vector<ExpertSpill> spills = PlanExpertSpill(counts, 2, 4);
  ASSERT_EQ(spills.size(), 1u);
  EXPECT_EQ(spills[0].expert, 1);
  EXPECT_EQ(spills[0].owner, 0);
  EXPECT_EQ(spills[0].borrower, 1);
  EXPECT_EQ(spills[0].copies, (std::vector<int64_t>{20, 20}));
  EXPECT_EQ(RankLoads(counts, 2, 4, spills), (std::vector<int64_t>{60, 60}));
  EXPECT_EQ(SpillsBorrowedBy(spills, 1).size(), 1u);
  EXPECT_TRUE(SpillsBorrowedBy(spills, 0).empty());
  EXPECT_EQ(SpilledCopies(spills, 2, 4),
            (std::vector<int64_t>{0, 20, 0, 0, 0, 20, 0, 0}));
  // Each source's list for rank 0 keeps 10 + 20 of experts 0 and 1; rank
  // 1's list has its own 10 + 0 and the 20 spilled copies of expert 1.
  EXPECT_EQ(DispatchListLengths(counts, spills, 2, 4),
            (std::vector<int64_t>{30, 30, 30, 30}));
  EXPECT_EQ(DispatchListLengths(counts, {}, 2, 4),
            (std::vector<int64_t>{50, 10, 50, 10}));
}

TEST(ExpertSpillTest, EveryCopyGoesToOneRankAndTheBusiestEndsNearTheMean) {
  // Four ranks of two experts; every source sends nearly everything to
  // rank 0's experts, unevenly (the rounding remainder must be placed).
  const int ranks = 4;
  const int64_t experts = 8;
  std::vector<int64_t> counts(ranks * experts, 1);
  for (int s = 0; s < ranks; ++s) {
    counts[s * experts + 0] = 97 + 13 * s;
    counts[s * experts + 1] = 41 + 7 * s;
  }
  const std::vector<ExpertSpill> spills =
      PlanExpertSpill(counts, ranks, experts);
  ASSERT_FALSE(spills.empty());
  const std::vector<int64_t> loads = RankLoads(counts, ranks, experts, spills);
  int64_t total = 0;
  for (int64_t count : counts) total += count;
  int64_t sum = 0;
  for (int64_t load : loads) sum += load;
  EXPECT_EQ(sum, total);
  // Each expert is lent once at most, so rank 0 (two experts) can shed at
  // most two experts' excess: it ends well below where it started.
  EXPECT_LT(loads[0], counts[0] + counts[1] + counts[8] + counts[9] +
                          counts[16] + counts[17] + counts[24] + counts[25]);
  std::vector<bool> lent(experts, false);
  for (const ExpertSpill& spill : spills) {
    EXPECT_FALSE(lent[spill.expert]) << "expert " << spill.expert;
    lent[spill.expert] = true;
    EXPECT_NE(spill.owner, spill.borrower);
  }
  // The same counts give the same spills (every rank computes them).
  const std::vector<ExpertSpill> again =
      PlanExpertSpill(counts, ranks, experts);
  ASSERT_EQ(again.size(), spills.size());
  for (size_t i = 0; i < spills.size(); ++i) {
    EXPECT_EQ(again[i].expert, spills[i].expert);
    EXPECT_EQ(again[i].borrower, spills[i].borrower);
    EXPECT_EQ(again[i].copies, spills[i].copies);
  }
}

}  // namespace
}  // namespace plateau::engine
