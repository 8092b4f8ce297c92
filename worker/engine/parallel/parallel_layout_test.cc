#include "worker/engine/parallel/parallel_layout.h"

#include <algorithm>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
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

// Connects every rank's groups (one thread per rank) and all-gathers the
// global rank ids in each: each group must hold exactly the layout's ranks,
// in rank order.
void ExpectGroupsHoldTheirRanks(const ParallelSizes& sizes) {
  const ParallelLayout layout(sizes);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < layout.world(); ++rank) {
    threads.emplace_back([&, rank] {
      auto groups = ConnectRankGroups(layout, rank, store, absl::Seconds(20));
      ASSERT_TRUE(groups.ok()) << groups.status();
      const std::vector<std::pair<Communicator*, Ranks>> expected = {
          {groups->world.get(), layout.WorldGroup()},
          {groups->ep.get(), layout.EpGroup(rank)},
          {groups->dp.get(), layout.DpGroup(rank)},
          {groups->pp.get(), layout.PpGroup(rank)},
          {groups->dense_replicas.get(), layout.DenseReplicaGroup(rank)},
      };
      for (const auto& [communicator, members] : expected) {
        ASSERT_EQ(communicator->size(), static_cast<int>(members.size()));
        EXPECT_EQ(members[communicator->rank()], rank);
        const float id = static_cast<float>(rank);
        std::vector<float> ids(members.size());
        ASSERT_TRUE(communicator->AllGather(&id, ids.data(), 1).ok());
        EXPECT_EQ(Ranks(ids.begin(), ids.end()), members) << "rank " << rank;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(ConnectRankGroupsTest, ExpertAndDataParallel) {
  ExpectGroupsHoldTheirRanks(ParallelSizes{.ep = 2, .pp = 1, .dp = 2});
}

TEST(ConnectRankGroupsTest, ExpertAndPipelineParallel) {
  ExpectGroupsHoldTheirRanks(ParallelSizes{.ep = 2, .pp = 2, .dp = 1});
}

TEST(ConnectRankGroupsTest, AllThreeDimensions) {
  ExpectGroupsHoldTheirRanks(ParallelSizes{.ep = 2, .pp = 2, .dp = 2});
}

TEST(ConnectRankGroupsTest, RejectsARankOutsideTheWorld) {
  const ParallelLayout layout(ParallelSizes{.ep = 2});
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  EXPECT_EQ(
      ConnectRankGroups(layout, 2, store, absl::Seconds(1)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::engine
