#include "engine/parallel/rank_threads.h"

#include <memory>
#include <thread>
#include <vector>

#include "engine/parallel/gloo_communicator.h"
#include "gloo/rendezvous/hash_store.h"

namespace plateau::engine {

void RunEveryRank(
    const ParallelLayout& layout, absl::Duration timeout,
    absl::FunctionRef<void(int rank, absl::StatusOr<RankGroups*> groups)>
        body) {
  if (layout.world() == 1) {
    body(0, nullptr);
    return;
  }
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < layout.world(); ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<RankGroups> groups =
          ConnectRankGroups(layout, rank, GlooGroupConnector(store, timeout));
      if (!groups.ok()) {
        body(rank, groups.status());
        return;
      }
      body(rank, &*groups);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace plateau::engine
