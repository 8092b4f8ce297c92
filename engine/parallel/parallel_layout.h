// How the ranks of a job map onto its parallel dimensions, and the
// communication groups each rank belongs to: plain arithmetic, shared by the
// engine (rank_groups.h connects the groups) and the memory planner.
//
// Ranks are numbered with ep varying fastest, then dp, then pp:
//   rank = ep_index + ep * (dp_index + dp * pp_index)
// so the ranks of an expert-parallel group are consecutive (they exchange
// tokens every layer and should share a node), and a pipeline stage is one
// consecutive block of ep * dp ranks.
//
// Groups of a rank (each a list of global ranks in increasing order, which is
// also the rank order inside the group):
//   EpGroup:           same pp and dp index, every ep index (token dispatch);
//   DpGroup:           same pp and ep index, every dp index (expert gradients);
//   PpGroup:           same ep and dp index, every pp index (activations);
//   DenseReplicaGroup: same pp index, every ep and dp index: the ranks holding
//                      copies of that stage's dense (non-expert) weights.
#ifndef PLATEAU_ENGINE_PARALLEL_PARALLEL_LAYOUT_H_
#define PLATEAU_ENGINE_PARALLEL_PARALLEL_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace plateau::engine {

struct ParallelSizes {
  int ep = 1;  // Expert-parallel ranks.
  int pp = 1;  // Pipeline stages.
  int dp = 1;  // Data-parallel replicas.
  int world() const { return ep * pp * dp; }
};

// INVALID_ARGUMENT unless every size is >= 1 (and the world fits an int).
absl::Status ValidateParallelSizes(const ParallelSizes& sizes);

// Pure arithmetic over a valid ParallelSizes. Every `rank` argument
// REQUIRES: 0 <= rank < sizes().world(); indices REQUIRE their range.
class ParallelLayout {
 public:
  // REQUIRES: ValidateParallelSizes(sizes).ok().
  explicit ParallelLayout(ParallelSizes sizes);

  const ParallelSizes& sizes() const { return sizes_; }
  int world() const { return sizes_.world(); }

  int ep_index(int rank) const;
  int dp_index(int rank) const;
  int pp_index(int rank) const;
  int RankOf(int pp_index, int dp_index, int ep_index) const;

  std::vector<int> EpGroup(int rank) const;
  std::vector<int> DpGroup(int rank) const;
  std::vector<int> PpGroup(int rank) const;
  std::vector<int> DenseReplicaGroup(int rank) const;
  std::vector<int> WorldGroup() const;

 private:
  ParallelSizes sizes_;
};

// A group's store prefix: its kind and its members, e.g. "ep[0-1]",
// "dp[1-7/2]" (first-last/stride), "pp[3]". Distinct groups of a kind have
// distinct names; kinds are distinct prefixes. Members in increasing order.
std::string GroupName(const std::string& kind, const std::vector<int>& members);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_PARALLEL_LAYOUT_H_
