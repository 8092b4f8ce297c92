#include "plan/rank_replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "engine/model/model_footprint.h"
#include "engine/model/model_shard.h"
#include "engine/model/parameter_layout.h"
#include "engine/optim/optimizer_footprint.h"
#include "engine/optim/tier_rule.h"
#include "engine/train/checkpoint_footprint.h"
#include "engine/train/evaluation_rounds.h"

namespace plateau::plan {
namespace {

using Handle = MemoryLedger::Handle;
using engine::ParameterLayout;

// The copies every source rank routes to each expert: T x top_k split by
// `load`, rounded so that they add up exactly.
std::vector<int64_t> SourceCounts(int64_t copies,
                                  const std::vector<double>& load) {
  std::vector<int64_t> counts(load.size());
  std::vector<std::pair<double, size_t>> remainders;
  int64_t assigned = 0;
  for (size_t e = 0; e < load.size(); ++e) {
    const double exact = load[e] * static_cast<double>(copies);
    counts[e] = static_cast<int64_t>(std::floor(exact));
    assigned += counts[e];
    remainders.push_back({exact - static_cast<double>(counts[e]), e});
  }
  std::sort(remainders.begin(), remainders.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; assigned < copies && i < remainders.size(); ++i) {
    ++counts[remainders[i].second];
    ++assigned;
  }
  return counts;
}

// The copy counts of every rank of the expert group (`tokens[s]`: the
// micro-batch tokens of its rank s) for a layer whose experts take `load`:
// the dispatch plan's count matrix, as the engine's routing would fill it.
std::vector<int64_t> CountMatrix(const ReplayJob& job,
                                 const std::vector<double>& load,
                                 const std::vector<int64_t>& tokens) {
  std::vector<int64_t> counts;
  counts.reserve(static_cast<size_t>(job.ep) * load.size());
  // Ranks with as many tokens route alike: each count is split once.
  std::map<int64_t, std::vector<int64_t>> by_tokens;
  for (int s = 0; s < job.ep; ++s) {
    auto [split, added] = by_tokens.try_emplace(tokens[s]);
    if (added) split->second = SourceCounts(tokens[s] * job.config.top_k, load);
    counts.insert(counts.end(), split->second.begin(), split->second.end());
  }
  return counts;
}

// Chunks at their bound are all alike (ChunkRows::kBound): the first
// (dispatched before the loop, prefetching the second), one in the middle
// and the last (prefetching none) reach every peak that all K reach.
constexpr int64_t kRepresentativeChunks = 3;

// The steady phase of 1F1B: its first micro-batch is as the middle ones,
// and its last receives no next input.
constexpr int64_t kRepresentativeSteadyMicroBatches = 2;

// One pass of a micro-batch over this rank's shard, the expert group's
// ranks having `tokens` tokens each. Real counts vary around the expected
// ones, so each dispatch chunk is taken at its bound.
engine::PassShape PassShapeOf(const ReplayJob& job,
                              const engine::ModelShard& shard, int self,
                              const std::vector<int64_t>& tokens) {
  engine::PassShape pass;
  pass.sequences = tokens[self] / job.config.seq_len;
  pass.expert_parallel = job.ep > 1;
  pass.head.sharded = shard.head_sharded;
  pass.head.group_tokens = tokens;
  for (int64_t l = 0; l < shard.layer_count; ++l) {
    // One load for every layer: every layer dispatches alike.
    if (job.layer_expert_load.size() == 1 && l > 0) {
      pass.dispatch.push_back(pass.dispatch.front());
      continue;
    }
    const std::vector<double>& load =
        job.layer_expert_load.size() == 1
            ? job.layer_expert_load[0]
            : job.layer_expert_load[shard.first_layer + l];
    pass.dispatch.push_back(engine::DispatchShapeOf(
        job.config, job.ep, self, CountMatrix(job, load, tokens),
        engine::ChunkRows::kBound,
        job.every_repetition ? std::numeric_limits<int64_t>::max()
                             : kRepresentativeChunks));
  }
  return pass;
}

// A rank's share of the model and of the optimizer's state, as the
// engine's footprints size them.
struct RankState {
  RankState(const engine::ModelConfig& config, const engine::ModelShard& shard)
      : shard(shard), layout(config, shard) {}

  engine::ModelShard shard;
  ParameterLayout layout;
  std::vector<engine::ZeroRegion> regions;  // as ZeroRegionsOf orders them
  engine::AdamWState adamw;                 // AdamW
  engine::TieredState tiered;               // the tiered optimizers
  // Checkpoint chunks this rank writes (elements): the weights of its
  // shards and its optimizer state.
  int64_t weight_pieces = 0;
  int64_t optimizer_pieces = 0;
};

engine::ModelShard ShardOf(const ReplayJob& job, const RankIndex& rank) {
  return engine::ModelShard::ForRank(job.config, rank.pp, job.pp, rank.ep,
                                     job.ep, job.dp);
}

bool Tiered(const ReplayJob& job) {
  return job.optimizer != v1::OPTIMIZER_KIND_ADAMW;
}

// Where `rank` is in `group` (the engine's layout lists a group's ranks in
// their order within it).
int IndexIn(const std::vector<int>& group, int rank) {
  return static_cast<int>(std::find(group.begin(), group.end(), rank) -
                          group.begin());
}

RankState RankStateOf(const ReplayJob& job, const RankIndex& rank) {
  RankState state(job.config, ShardOf(job, rank));
  const ParameterLayout& layout = state.layout;
  const engine::ParallelLayout parallel(job.sizes());
  const int global = rank.rank(job);
  // ZeroShards' groups: the stage's batch group for the dense region, the
  // data-parallel group for the experts.
  const std::vector<int> dense_group = parallel.DenseReplicaGroup(global);
  const std::vector<int> expert_group = parallel.DpGroup(global);
  state.regions = engine::ZeroRegionsOf(
      layout, static_cast<int>(dense_group.size()),
      IndexIn(dense_group, global), static_cast<int>(expert_group.size()),
      IndexIn(expert_group, global));
  const std::vector<engine::OwnedRange> owned =
      engine::OwnedRangesOf(state.regions);
  state.adamw = engine::AdamWState::For(
      layout, owned, engine::OptimizerOffloadOf(job.optimizer_offload),
      engine::kOffloadBucketElements);
  if (Tiered(job)) {
    state.tiered = engine::TieredState::For(
        layout, owned, engine::TieredKindOf(job.optimizer),
        engine::MomentumStorageOf(job.expert_momentum));
  }
  state.weight_pieces = engine::OwnedWeightElements(layout, owned);
  // Every group has a communicator in a run of more than one rank.
  const bool grouped = job.world() > 1;
  state.optimizer_pieces =
      Tiered(job)
          ? engine::TieredCheckpointElements(
                state.tiered, {!grouped || IndexIn(dense_group, global) == 0,
                               !grouped || IndexIn(expert_group, global) == 0})
          : engine::AdamWCheckpointElements(state.adamw);
  return state;
}

// The replay of one rank; member functions follow the engine's functions.
class Replay {
 public:
  Replay(const ReplayJob& job, const RankIndex& rank, MemoryLedger* ledger)
      : job_(job),
        config_(job.config),
        rank_(rank),
        ledger_(*ledger),
        state_(RankStateOf(job, rank)),
        model_(job.config, state_.shard, ledger),
        step_(PassShapeOf(
            job, state_.shard, rank.ep,
            std::vector<int64_t>(job.ep,
                                 job.rank_sequences * job.config.seq_len))) {}

  void Run() {
    SetUp();
    if (job_.background_checkpoints) {
      // The previous checkpoint's write in flight: every step and pass runs
      // beside a snapshot (the state it was copied from is the set-up's).
      Handle in_flight = Snapshot();
      Step();
      if (job_.evaluates) Evaluate();
      Free(in_flight);
      return;
    }
    Step();
    if (job_.evaluates) Evaluate();
    ledger_.SetPhase("checkpoint");
    Handle snapshot = Snapshot();
    Free(snapshot);
  }

 private:
  void Free(Handle& handle) { ledger_.Free(&handle); }
  bool offloaded() const {
    return job_.optimizer_offload != v1::OPTIMIZER_OFFLOAD_NONE;
  }

  // ---- Trainer::SetUp ----
  void SetUp() {
    ledger_.SetPhase("set-up");
    engine::ModelSetUpFootprint(engine::ModelStateBuffers::For(state_.layout),
                                ledger_);
    if (!Tiered(job_)) {
      engine::AdamWSetUpFootprint(state_.adamw, ledger_);
      return;
    }
    // Every group has a communicator in a run of more than one rank.
    const bool grouped = job_.world() > 1;
    engine::TieredSetUpFootprint(
        engine::TieredStateBuffers::For(state_.tiered, offloaded(),
                                        {grouped, grouped}),
        ledger_);
  }

  // ---- TrainingStep::Run ----
  void Step() {
    // The backend's scratch: its staging for the bf16 products, held from
    // the first on (kernels::Ops::SetMatmulStagingBytes), or the bf16
    // embedding backward's sort where that is larger (the arena keeps its
    // largest block; planned from the step's start).
    const int64_t scratch =
        std::max(engine::MatmulStagingBytes(config_),
                 engine::EmbeddingSortScratchBytes(config_, state_.shard,
                                                   step_.sequences));
    if (scratch > 0) {
      ledger_.Allocate(engine::DeviceBuffer(engine::MemoryComponent::kOther,
                                            {scratch / engine::kBfloat16Bytes},
                                            engine::DType::kBfloat16));
    }
    const bool first = rank_.pp == 0;
    const bool last = rank_.pp == job_.pp - 1;
    const int64_t m = job_.micro_batches;
    // StageLinks' buffers for the previous stage's output and the next
    // one's input gradient.
    auto receive_input = [&]() {
      return ledger_.Allocate(
          engine::BoundaryActivationsBuffer(config_, step_.sequences));
    };
    auto receive_gradient = [&]() {
      return ledger_.Allocate(
          engine::ResidualGradientBuffer(config_, step_.sequences));
    };
    const int64_t warmup = std::min<int64_t>(job_.pp - rank_.pp - 1, m);
    const int64_t steady =
        job_.every_repetition
            ? m - warmup
            : std::min(m - warmup, kRepresentativeSteadyMicroBatches);
    int64_t next_forward = 0, next_backward = 0;
    for (int64_t i = 0; i < warmup; ++i, ++next_forward) {
      Handle input = first ? 0 : receive_input();
      Handle output = model_.Forward(next_forward, step_, input);
      Free(output);  // sent on
    }
    Handle input = steady > 0 && !first ? receive_input() : 0;
    for (int64_t i = 0; i < steady; ++i, ++next_backward) {
      Handle output = model_.Forward(next_forward, step_, input);
      Handle output_gradient = last ? 0 : receive_gradient();
      ++next_forward;
      Free(output);
      Handle input_gradient = model_.Backward(next_backward, output_gradient);
      if (i + 1 < steady && !first) input = receive_input();
      Free(input_gradient);
    }
    for (int64_t i = 0; i < warmup; ++i, ++next_backward) {
      Handle output_gradient = last ? 0 : receive_gradient();
      Handle input_gradient = model_.Backward(next_backward, output_gradient);
      Free(input_gradient);
    }
    if (const std::optional<engine::BufferSpec> tied_head =
            engine::TiedHeadGradientsBuffer(config_, state_.shard)) {
      ledger_.SetPhase("tied head gradient");
      Handle received = ledger_.Allocate(*tied_head);
      Free(received);
    }
    ledger_.SetPhase("gradient reduce-scatter");
    engine::ReduceGradientsFootprint(state_.regions, ledger_);
    ledger_.SetPhase("gradient norm and clipping");
    engine::OwnedGradientsFootprint(state_.regions, ledger_);
    ledger_.SetPhase("weight all-gather");
    engine::GatherWeightsFootprint(state_.regions, ledger_);
  }

  // ---- EvaluateWindows: the largest round of a validation pass on this
  // rank, forward only (Model::EvaluateStage) ----
  void Evaluate() {
    std::vector<int64_t> tokens(job_.ep);
    for (int r = 0; r < job_.ep; ++r) {
      tokens[r] = EvaluationSequences(r) * config_.seq_len;
    }
    if (tokens[rank_.ep] == 0) return;
    ledger_.SetPhase("validation");
    const engine::PassShape pass =
        PassShapeOf(job_, state_.shard, rank_.ep, tokens);
    Handle input = state_.shard.has_embedding
                       ? 0
                       : ledger_.Allocate(engine::BoundaryActivationsBuffer(
                             config_, pass.sequences));
    model_.Evaluate(pass, input);
  }

  // The most validation windows expert rank `ep` of this rank's group
  // runs in one round (engine/train/evaluation_rounds.h): without the
  // count of windows, a full round's.
  int64_t EvaluationSequences(int ep) const {
    const int64_t batch_ranks = int64_t{job_.ep} * job_.dp;
    // Its place in the stage's batch group, by the engine's layout.
    const engine::ParallelLayout parallel(job_.sizes());
    const int global = parallel.RankOf(rank_.pp, rank_.dp, ep);
    const int64_t batch_index =
        IndexIn(parallel.DenseReplicaGroup(global), global);
    const int64_t windows = job_.validation_windows;
    if (windows <= 0) return job_.rank_sequences;
    int64_t most = 0;
    for (int64_t first = 0; first < windows;) {
      const int64_t round = engine::RoundWindows(first, windows, batch_ranks,
                                                 job_.rank_sequences);
      most = std::max(
          most,
          engine::RoundShareOf(round, batch_ranks, batch_index).evaluated);
      first += round;
    }
    return most;
  }

  // ---- Trainer::StartCheckpoint: every rank copies the chunks of its
  // own shards to a host snapshot, which is held until they are written ----
  Handle Snapshot() {
    return ledger_.Allocate(
        engine::SnapshotBuffer(state_.weight_pieces + state_.optimizer_pieces));
  }

  const ReplayJob& job_;
  const engine::ModelConfig& config_;
  const RankIndex rank_;
  MemoryLedger& ledger_;
  const RankState state_;
  // The engine's own footprints of this rank's model, and a training
  // micro-batch's pass (every rank of the expert group has as many
  // tokens).
  engine::ModelFootprint model_;
  const engine::PassShape step_;
};

}  // namespace

std::vector<RankIndex> DistinctRanks(const ReplayJob& job) {
  std::vector<int> expert_indices;
  if (job.ep <= 8) {
    for (int ep = 0; ep < job.ep; ++ep) expert_indices.push_back(ep);
  } else {
    expert_indices = {0, 1, job.ep - 1};
  }
  std::vector<int> replicas = {0};
  if (job.dp > 1) replicas.push_back(1);
  // Stages 1 to pp - 2 hold alike shards and differ only in how many
  // micro-batches they have in flight, most on stage 1.
  std::vector<int> stages;
  for (int pp = 0; pp < job.pp; ++pp) {
    if (job.every_repetition || pp < 2 || pp == job.pp - 1) {
      stages.push_back(pp);
    }
  }
  std::vector<RankIndex> ranks;
  for (int pp : stages) {
    for (int ep : expert_indices) {
      for (int dp : replicas) ranks.push_back({pp, ep, dp});
    }
  }
  return ranks;
}

void ReplayRank(const ReplayJob& job, const RankIndex& rank,
                MemoryLedger* ledger) {
  Replay(job, rank, ledger).Run();
}

}  // namespace plateau::plan
