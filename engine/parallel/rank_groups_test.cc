#include "engine/parallel/rank_groups.h"

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "engine/parallel/gloo_communicator.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using Ranks = std::vector<int>;

// Connects every rank's groups (one thread per rank) and all-gathers the
// global rank ids in each: each group must hold exactly the layout's ranks,
// in rank order.
void ExpectGroupsHoldTheirRanks(const ParallelSizes& sizes) {
  const ParallelLayout layout(sizes);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < layout.world(); ++rank) {
    threads.emplace_back([&, rank] {
      auto groups = ConnectRankGroups(
          layout, rank, GlooGroupConnector(store, absl::Seconds(20)));
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
      ConnectRankGroups(layout, 2, GlooGroupConnector(store, absl::Seconds(1)))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::engine
