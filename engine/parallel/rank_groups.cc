#include "engine/parallel/rank_groups.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace plateau::engine {
namespace {

// Connects `rank` into the group of global ranks `members` (which holds it).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGroup(
    const std::string& kind, const std::vector<int>& members, int rank,
    const GroupConnector& connect) {
  int group_rank = 0;
  while (members[group_rank] != rank) ++group_rank;
  return connect(GroupName(kind, members), group_rank,
                 static_cast<int>(members.size()));
}

}  // namespace

absl::StatusOr<RankGroups> ConnectRankGroups(const ParallelLayout& layout,
                                             int rank,
                                             const GroupConnector& connect) {
  RETURN_IF_ERROR(ValidateParallelSizes(layout.sizes()));
  if (rank < 0 || rank >= layout.world()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside a world of ", layout.world()));
  }
  // The order below is the same on every rank; see the header.
  RankGroups groups;
  ASSIGN_OR_RETURN(groups.world,
                   ConnectGroup("world", layout.WorldGroup(), rank, connect));
  ASSIGN_OR_RETURN(groups.ep,
                   ConnectGroup("ep", layout.EpGroup(rank), rank, connect));
  ASSIGN_OR_RETURN(groups.dp,
                   ConnectGroup("dp", layout.DpGroup(rank), rank, connect));
  ASSIGN_OR_RETURN(groups.pp,
                   ConnectGroup("pp", layout.PpGroup(rank), rank, connect));
  ASSIGN_OR_RETURN(
      groups.dense_replicas,
      ConnectGroup("dense", layout.DenseReplicaGroup(rank), rank, connect));
  return groups;
}

}  // namespace plateau::engine
