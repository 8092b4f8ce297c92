// A rank's place in its job (ParallelLayout) and the communicators of its
// groups, as the training step and evaluation use them. Null communicators
// mean "this rank alone" (a single-rank run has no groups at all).
//
// The batch of a step is split over the ranks of a pipeline stage's batch
// group (its expert x data parallel ranks, DenseReplicaGroup): micro-batch
// m of M is the step's sequences [m * S / M, (m + 1) * S / M), and batch
// rank b takes the b-th equal part of it. Batch rank b of a stage is the
// rank with ep_index + ep * dp_index == b, so the ranks of one pipeline (the
// same ep and dp index on every stage) carry the same sequences.
#ifndef PLATEAU_ENGINE_TRAIN_RANK_CONTEXT_H_
#define PLATEAU_ENGINE_TRAIN_RANK_CONTEXT_H_

#include "engine/model/layer_context.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"

namespace plateau::engine {

struct RankContext {
  ParallelSizes sizes;
  int rank = 0;
  int ep_index = 0;
  int dp_index = 0;
  int pp_index = 0;
  Communicator* world = nullptr;
  Communicator* experts = nullptr;   // EpGroup
  Communicator* data = nullptr;      // DpGroup: replicas of the same experts
  Communicator* pipeline = nullptr;  // PpGroup: index = pp_index
  Communicator* batch = nullptr;     // DenseReplicaGroup

  // The whole job on one rank.
  RankContext() = default;
  // `groups` must outlive the context; null only for a one-rank layout.
  RankContext(const ParallelLayout& layout, int rank, RankGroups* groups)
      : sizes(layout.sizes()),
        rank(rank),
        ep_index(layout.ep_index(rank)),
        dp_index(layout.dp_index(rank)),
        pp_index(layout.pp_index(rank)) {
    if (groups == nullptr) return;
    world = groups->world.get();
    experts = groups->ep.get();
    data = groups->dp.get();
    pipeline = groups->pp.get();
    batch = groups->dense_replicas.get();
  }

  int batch_ranks() const { return sizes.ep * sizes.dp; }
  int batch_index() const { return ep_index + sizes.ep * dp_index; }
  bool first_stage() const { return pp_index == 0; }
  bool last_stage() const { return pp_index == sizes.pp - 1; }
  ModelGroups model_groups() const { return {experts, batch}; }
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_RANK_CONTEXT_H_
