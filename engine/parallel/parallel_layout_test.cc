#include "engine/parallel/parallel_layout.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using Ranks = std::vector<int>;

TEST(ParallelLayoutTest, EpVariesFastestThenDpThenPp) {
  const ParallelLayout layout(ParallelSizes{.ep = 2, .pp = 3, .dp = 2});
  EXPECT_EQ(layout.world(), 12);
  int rank = 0;
  for (int pp = 0; pp < 3; ++pp) {
    for (int dp = 0; dp < 2; ++dp) {
      for (int ep = 0; ep < 2; ++ep, ++rank) {
        EXPECT_EQ(layout.RankOf(pp, dp, ep), rank);
        EXPECT_EQ(layout.ep_index(rank), ep);
        EXPECT_EQ(layout.dp_index(rank), dp);
        EXPECT_EQ(layout.pp_index(rank), pp);
      }
    }
  }
}

TEST(ParallelLayoutTest, GroupsOfARank) {
  const ParallelLayout layout(ParallelSizes{.ep = 2, .pp = 3, .dp = 2});
  // Rank 7: pp 1, dp 1, ep 1.
  EXPECT_EQ(layout.EpGroup(7), (Ranks{6, 7}));
  EXPECT_EQ(layout.DpGroup(7), (Ranks{5, 7}));
  EXPECT_EQ(layout.PpGroup(7), (Ranks{3, 7, 11}));
  EXPECT_EQ(layout.DenseReplicaGroup(7), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(layout.WorldGroup().size(), 12u);
}

// Every rank is in exactly one group of each kind, and a group's members
// all name that same group.
TEST(ParallelLayoutTest, GroupsPartitionTheWorld) {
  const ParallelLayout layout(ParallelSizes{.ep = 4, .pp = 2, .dp = 3});
  for (auto group_of :
       {&ParallelLayout::EpGroup, &ParallelLayout::DpGroup,
        &ParallelLayout::PpGroup, &ParallelLayout::DenseReplicaGroup}) {
    for (int rank = 0; rank < layout.world(); ++rank) {
      const Ranks group = (layout.*group_of)(rank);
      EXPECT_EQ(std::count(group.begin(), group.end(), rank), 1);
      EXPECT_TRUE(std::is_sorted(group.begin(), group.end()));
      for (int member : group) EXPECT_EQ((layout.*group_of)(member), group);
    }
  }
  EXPECT_EQ(layout.EpGroup(0).size(), 4u);
  EXPECT_EQ(layout.DpGroup(0).size(), 3u);
  EXPECT_EQ(layout.PpGroup(0).size(), 2u);
  EXPECT_EQ(layout.DenseReplicaGroup(0).size(), 12u);
}

TEST(ParallelLayoutTest, ValidatesSizes) {
  EXPECT_TRUE(ValidateParallelSizes(ParallelSizes{}).ok());
  EXPECT_FALSE(ValidateParallelSizes(ParallelSizes{.ep = 0}).ok());
  EXPECT_FALSE(ValidateParallelSizes(ParallelSizes{.pp = -1}).ok());
  EXPECT_FALSE(
      ValidateParallelSizes(ParallelSizes{.ep = 65536, .pp = 65536}).ok());
}

TEST(ParallelLayoutTest, GroupNamesAreDistinct) {
  EXPECT_EQ(GroupName("ep", {0, 1}), "ep[0-1]");
  EXPECT_EQ(GroupName("dp", {1, 3, 5, 7}), "dp[1-7/2]");
  EXPECT_EQ(GroupName("pp", {3}), "pp[3]");
  EXPECT_EQ(GroupName("x", {0, 1, 5}), "x[0,1,5]");
  std::set<std::string> names;
  const ParallelLayout layout(ParallelSizes{.ep = 2, .pp = 2, .dp = 3});
  for (int rank = 0; rank < layout.world(); ++rank) {
    names.insert(GroupName("ep", layout.EpGroup(rank)));
    names.insert(GroupName("dp", layout.DpGroup(rank)));
    names.insert(GroupName("pp", layout.PpGroup(rank)));
    names.insert(GroupName("dense", layout.DenseReplicaGroup(rank)));
  }
  // 6 ep + 4 dp + 6 pp + 2 dense groups.
  EXPECT_EQ(names.size(), 18u);
}

}  // namespace
}  // namespace plateau::engine
