#include "engine/parallel/parallel_layout.h"

#include <cassert>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace plateau::engine {

absl::Status ValidateParallelSizes(const ParallelSizes& sizes) {
  if (sizes.ep < 1 || sizes.pp < 1 || sizes.dp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel sizes must be >= 1: ep=", sizes.ep,
                     " pp=", sizes.pp, " dp=", sizes.dp));
  }
  const int64_t world = int64_t{sizes.ep} * sizes.pp * sizes.dp;
  if (world > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("world of ", world, " ranks is too large"));
  }
  return absl::OkStatus();
}

ParallelLayout::ParallelLayout(ParallelSizes sizes) : sizes_(sizes) {
  assert(ValidateParallelSizes(sizes_).ok());
}

int ParallelLayout::ep_index(int rank) const { return rank % sizes_.ep; }

int ParallelLayout::dp_index(int rank) const {
  return (rank / sizes_.ep) % sizes_.dp;
}

int ParallelLayout::pp_index(int rank) const {
  return rank / (sizes_.ep * sizes_.dp);
}

int ParallelLayout::RankOf(int pp_index, int dp_index, int ep_index) const {
  assert(pp_index >= 0 && pp_index < sizes_.pp);
  assert(dp_index >= 0 && dp_index < sizes_.dp);
  assert(ep_index >= 0 && ep_index < sizes_.ep);
  return ep_index + sizes_.ep * (dp_index + sizes_.dp * pp_index);
}

std::vector<int> ParallelLayout::EpGroup(int rank) const {
  std::vector<int> group;
  for (int ep = 0; ep < sizes_.ep; ++ep) {
    group.push_back(RankOf(pp_index(rank), dp_index(rank), ep));
  }
  return group;
}

std::vector<int> ParallelLayout::DpGroup(int rank) const {
  std::vector<int> group;
  for (int dp = 0; dp < sizes_.dp; ++dp) {
    group.push_back(RankOf(pp_index(rank), dp, ep_index(rank)));
  }
  return group;
}

std::vector<int> ParallelLayout::PpGroup(int rank) const {
  std::vector<int> group;
  for (int pp = 0; pp < sizes_.pp; ++pp) {
    group.push_back(RankOf(pp, dp_index(rank), ep_index(rank)));
  }
  return group;
}

std::vector<int> ParallelLayout::DenseReplicaGroup(int rank) const {
  // One pipeline stage is the consecutive block of ep * dp ranks.
  std::vector<int> group;
  for (int dp = 0; dp < sizes_.dp; ++dp) {
    for (int ep = 0; ep < sizes_.ep; ++ep) {
      group.push_back(RankOf(pp_index(rank), dp, ep));
    }
  }
  return group;
}

std::vector<int> ParallelLayout::WorldGroup() const {
  std::vector<int> group(world());
  for (int rank = 0; rank < world(); ++rank) group[rank] = rank;
  return group;
}

std::string GroupName(const std::string& kind,
                      const std::vector<int>& members) {
  if (members.size() == 1) return absl::StrCat(kind, "[", members[0], "]");
  bool arithmetic = members.size() >= 2;
  for (size_t i = 2; i < members.size() && arithmetic; ++i) {
    arithmetic = members[i] - members[i - 1] == members[1] - members[0];
  }
  if (!arithmetic)
    return absl::StrCat(kind, "[", absl::StrJoin(members, ","), "]");
  const int stride = members[1] - members[0];
  std::string name =
      absl::StrCat(kind, "[", members.front(), "-", members.back());
  if (stride != 1) absl::StrAppend(&name, "/", stride);
  return name + "]";
}

}  // namespace plateau::engine
