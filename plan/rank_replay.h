// One rank's run replayed into a MemoryLedger: every allocation and free
// the engine makes (Trainer set-up, the 1F1B training step with its four
// schedules, the ZeRO-1 collectives, a validation round, a checkpoint), in
// the engine's order, computed from the shapes alone. The set-up, each
// micro-batch's forward and backward, the collectives and the validation
// pass are the engine's own footprints (engine/model/model_footprint.h,
// engine/optim/optimizer_footprint.h, engine/train/checkpoint_footprint.h):
// this file orders them along the 1F1B schedule and restates none of their
// sizes. The validation grid (tests/plan) holds all of it to the engine.
//
// The replay's time does not grow with the number of micro-batches or
// dispatch chunks: in the steady phase of 1F1B every micro-batch finds and
// leaves what the one before it did, and the chunks at their bound are all
// alike, so the replay plays the representative ones (the warm-up, the first
// and the last steady micro-batch, the cool-down; the first, a middle and
// the last chunk), which reach every peak that all of them reach.
//
// Routing is an assumption, not data: every source rank routes its token
// copies to the experts in the same proportions (`layer_expert_load`), in
// every micro-batch. Where the engine overlaps a dispatch chunk's
// exchange with the previous chunk's experts, the replay takes the worst
// interleaving (both at their largest at once).
#ifndef PLATEAU_PLAN_RANK_REPLAY_H_
#define PLATEAU_PLAN_RANK_REPLAY_H_

#include <cstdint>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/parallel/parallel_layout.h"
#include "plan/memory_ledger.h"
#include "proto/job.pb.h"

namespace plateau::plan {

struct ReplayJob {
  // The model with its schedules (vocab_block, dispatch_chunk_tokens,
  // offload_checkpoints, activation_checkpointing).
  engine::ModelConfig config;
  int ep = 1;
  int pp = 1;
  int dp = 1;
  int64_t micro_batches = 1;
  // Sequences of one micro-batch on one rank.
  int64_t rank_sequences = 1;
  v1::OptimizerKind optimizer = v1::OPTIMIZER_KIND_ADAMW;
  v1::ExpertMomentum expert_momentum = v1::EXPERT_MOMENTUM_FP32;
  v1::OptimizerOffload optimizer_offload = v1::OPTIMIZER_OFFLOAD_NONE;
  // The run validates (train.eval_every > 0), over this many windows (0:
  // not known; every round may then give a rank one window more).
  bool evaluates = false;
  int64_t validation_windows = 0;
  // Checkpoints are written in the background (TrainSpec.checkpoint_write):
  // a rank's snapshot is held across the steps and validations its write
  // spans.
  bool background_checkpoints = true;
  // Each expert's share of the routed copies (one per expert, summing to
  // 1), for every layer of the whole model, or one for all of them.
  std::vector<std::vector<double>> layer_expert_load;
  // Every micro-batch, chunk and pipeline stage instead of the
  // representative ones: for the tests that hold the two to the same peaks.
  bool every_repetition = false;

  int world() const { return ep * pp * dp; }
  engine::ParallelSizes sizes() const { return {ep, pp, dp}; }
};

struct RankIndex {
  int pp = 0;
  int ep = 0;
  int dp = 0;
  // The engine's numbering.
  int rank(const ReplayJob& job) const {
    return engine::ParallelLayout(job.sizes()).RankOf(pp, dp, ep);
  }
};

// The ranks whose allocations differ: pipeline stages 0 and 1 and the last
// (the stages between hold the same shards as stage 1, with fewer
// micro-batches in flight, so no peak above its peaks); every expert rank
// up to 8, beyond that the first two and the last (the busiest experts'
// owner under a stated skew, the borrower of their copies, and vocabulary
// shards within one row of every other's); data-parallel replicas 0 and 1
// (the first holds checkpoint pieces the others do not).
std::vector<RankIndex> DistinctRanks(const ReplayJob& job);

// Replays set-up, one training step, a validation pass (if the job
// validates) and one checkpoint of `rank` (later steps and passes repeat
// the same allocations, so they add no new peak). A background checkpoint's
// snapshot is held across the step and the pass, as the previous
// checkpoint's write may be. REQUIRES: a layout and
// load that PredictMemory accepted.
void ReplayRank(const ReplayJob& job, const RankIndex& rank,
                MemoryLedger* ledger);

}  // namespace plateau::plan

#endif  // PLATEAU_PLAN_RANK_REPLAY_H_
