// The communicators of one rank: one per group kind of parallel_layout.h,
// connected in an order every rank shares, so no connect can deadlock.
#ifndef PLATEAU_ENGINE_PARALLEL_RANK_GROUPS_H_
#define PLATEAU_ENGINE_PARALLEL_RANK_GROUPS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/parallel_layout.h"

namespace plateau::engine {

// One rank's communicators. Groups with identical members (e.g. dp and
// dense_replicas when ep == 1) are still separate connections.
struct RankGroups {
  std::unique_ptr<Communicator> world, ep, dp, pp, dense_replicas;
};

// Joins this rank into one group, given the group's name (GroupName's), the
// rank's index in it and its size: a Gloo or an NCCL communicator.
using GroupConnector =
    std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
        const std::string& group_name, int group_rank, int group_size)>;

// Connects `rank`'s groups in the order world, ep, dp, pp, dense_replicas on
// every rank: each rank is in exactly one group of each kind, so when every
// rank follows the same order every connect finds its peers and none
// deadlocks. INVALID_ARGUMENT for a bad rank; else the first failed group's
// error (the groups connected before it are closed).
absl::StatusOr<RankGroups> ConnectRankGroups(const ParallelLayout& layout,
                                             int rank,
                                             const GroupConnector& connect);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_RANK_GROUPS_H_
