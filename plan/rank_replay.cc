#include "plan/rank_replay.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "engine/memory/dtype.h"
#include "engine/model/model_footprint.h"
#include "engine/model/model_shard.h"
#include "engine/model/parameter_layout.h"
#include "engine/optim/tier_rule.h"

namespace plateau::plan {
namespace {

using Handle = MemoryLedger::Handle;
using engine::ParameterInfo;
using engine::ParameterLayout;
using engine::ParameterRole;

constexpr v1::MemoryComponent kWeights = v1::MEMORY_COMPONENT_WEIGHTS;
constexpr v1::MemoryComponent kGradients = v1::MEMORY_COMPONENT_GRADIENTS;
constexpr v1::MemoryComponent kOptimizer = v1::MEMORY_COMPONENT_OPTIMIZER;
constexpr v1::MemoryComponent kStaging = v1::MEMORY_COMPONENT_STAGING;

using engine::kFloatBytes;
// Model::InitializeWeights' host chunk (elements).
constexpr int64_t kInitializeChunkElements = int64_t{1} << 20;
// The optimizers' offload bucket (AdamWSettings, TieredSettings) and
// OffloadStreamAdamW's staging slots.
constexpr int64_t kOffloadBucketElements = int64_t{1} << 18;
constexpr int64_t kStreamStagingSlots = 2;

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
  for (int s = 0; s < job.ep; ++s) {
    const std::vector<int64_t> source =
        SourceCounts(tokens[s] * job.config.top_k, load);
    counts.insert(counts.end(), source.begin(), source.end());
  }
  return counts;
}

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
    const std::vector<double>& load =
        job.layer_expert_load.size() == 1
            ? job.layer_expert_load[0]
            : job.layer_expert_load[shard.first_layer + l];
    pass.dispatch.push_back(engine::DispatchShapeOf(
        job.config, job.ep, self, CountMatrix(job, load, tokens),
        engine::ChunkRows::kBound));
  }
  return pass;
}

// The ZeRO-1 regions (ZeroShards) of a rank's flat buffers.
struct Region {
  int64_t begin = 0;
  int64_t elements = 0;
  int group_size = 1;
  int group_index = 0;
  int64_t shard_elements() const { return elements / group_size; }
  int64_t shard_begin() const { return begin + group_index * shard_elements(); }
};

// A rank's share of the model and of the optimizer's state.
struct RankState {
  RankState(const engine::ModelConfig& config, const engine::ModelShard& shard)
      : shard(shard), layout(config, shard) {}

  engine::ModelShard shard;
  ParameterLayout layout;
  std::vector<Region> regions;  // dense, then experts
  // Owned (ZeRO-1) elements that are parameters, not padding.
  int64_t owned_parameter_elements = 0;
  // AdamW with offload: the longest run of owned parameters contiguous in
  // the buffers with the same weight decay.
  int64_t longest_owned_run = 0;
  // Tiered optimizers: the state's tensors (elements).
  int64_t momentum_float32 = 0;
  int64_t momentum_bfloat16 = 0;
  int64_t exact_second_moment = 0;
  int64_t statistics[2] = {0, 0};  // dense group, expert group
  // Checkpoint pieces this rank contributes (elements): its weights and
  // its optimizer state.
  int64_t weight_pieces = 0;
  int64_t optimizer_pieces = 0;
};

engine::ModelShard ShardOf(const ReplayJob& job, const RankIndex& rank) {
  engine::ModelShard shard =
      engine::ModelShard::For(job.config, rank.pp, job.pp, rank.ep, job.ep);
  shard.dense_alignment = job.ep * job.dp;
  shard.expert_alignment = job.dp;
  return shard;
}

bool Tiered(const ReplayJob& job) {
  return job.optimizer != v1::OPTIMIZER_KIND_ADAMW;
}

engine::TierRule RuleOf(const ReplayJob& job, const ParameterInfo& info) {
  return engine::TierRuleOf(engine::TieredKindOf(job.optimizer),
                            engine::MomentumStorageOf(job.expert_momentum),
                            info.role, info.global_shape);
}

// Units (tiered_optimizer.h): matrices normalised as a whole.
int64_t UnitRows(const ParameterInfo& info) {
  const std::vector<int64_t>& shape = info.global_shape;
  return shape.size() >= 2 ? shape[shape.size() - 2] : 1;
}
int64_t UnitMatrices(const ParameterInfo& info) {
  if (info.global_shape.size() <= 2) return 1;
  return info.elements / (UnitRows(info) * info.global_shape.back());
}

RankState RankStateOf(const ReplayJob& job, const RankIndex& rank) {
  RankState state(job.config, ShardOf(job, rank));
  const ParameterLayout& layout = state.layout;
  const bool grouped = job.world() > 1;
  state.regions.push_back({0, layout.dense_elements(), job.ep * job.dp,
                           rank.ep + job.ep * rank.dp});
  state.regions.push_back({layout.dense_elements(),
                           layout.total_elements() - layout.dense_elements(),
                           job.dp, rank.dp});
  // The owned ranges, as ZeroShards lists them, against the parameters.
  int64_t run = 0, run_end = -1;
  bool run_decay = false;
  for (const Region& region : state.regions) {
    const int64_t begin = region.shard_begin();
    const int64_t end = begin + region.shard_elements();
    for (const ParameterInfo& info : layout.parameters()) {
      const int64_t from = std::max(begin, info.offset);
      const int64_t to = std::min(end, info.offset + info.elements);
      if (from >= to) continue;
      const int64_t elements = to - from;
      state.owned_parameter_elements += elements;
      const bool decay = info.role != ParameterRole::kNorm;
      run = from == run_end && decay == run_decay ? run + elements : elements;
      run_end = to;
      run_decay = decay;
      state.longest_owned_run = std::max(state.longest_owned_run, run);
      if (!Tiered(job)) continue;
      const engine::TierRule rule = RuleOf(job, info);
      if (rule.momentum == engine::MomentumStorage::kFloat32) {
        state.momentum_float32 += elements;
      } else if (rule.momentum == engine::MomentumStorage::kBfloat16) {
        state.momentum_bfloat16 += elements;
      }
      if (rule.second_moment && !rule.factored) {
        state.exact_second_moment += elements;
      }
    }
  }
  for (const ParameterInfo& info : layout.parameters()) {
    const bool expert_region = layout.SplitOverExpertRanks(info);
    if (expert_region ? rank.dp == 0 : rank.dp == 0 && rank.ep == 0) {
      state.weight_pieces += info.elements;
    }
    if (!Tiered(job)) continue;
    const engine::TierRule rule = RuleOf(job, info);
    if (!rule.second_moment || !rule.factored) continue;
    const int group = info.role == ParameterRole::kExpert ? 1 : 0;
    const int64_t statistics =
        (UnitRows(info) + info.global_shape.back()) * UnitMatrices(info);
    state.statistics[group] += statistics;
    const int group_index = group == 1 ? rank.dp : rank.ep + job.ep * rank.dp;
    if (!grouped || group_index == 0) state.optimizer_pieces += statistics;
  }
  state.optimizer_pieces += Tiered(job) ? state.momentum_float32 +
                                              state.momentum_bfloat16 +
                                              state.exact_second_moment
                                        : 2 * state.owned_parameter_elements;
  return state;
}

// The whole model's weights and optimizer state (elements), as rank 0
// assembles them for a checkpoint.
std::pair<int64_t, int64_t> WholeCheckpointElements(const ReplayJob& job) {
  const ParameterLayout whole(job.config);
  int64_t weights = 0, optimizer = 0;
  for (const ParameterInfo& info : whole.parameters()) {
    weights += info.elements;
    if (!Tiered(job)) {
      optimizer += 2 * info.elements;
      continue;
    }
    const engine::TierRule rule = RuleOf(job, info);
    if (rule.momentum != engine::MomentumStorage::kNone) {
      optimizer += info.elements;
    }
    if (!rule.second_moment) continue;
    optimizer += rule.factored ? (UnitRows(info) + info.global_shape.back()) *
                                     UnitMatrices(info)
                               : info.elements;
  }
  return {weights, optimizer};
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
    Step();
    if (job_.evaluates) Evaluate();
    Checkpoint();
  }

 private:
  Handle Device(v1::MemoryComponent component, int64_t elements,
                int64_t element_bytes = kFloatBytes) {
    return ledger_.Allocate(v1::MEMORY_POOL_DEVICE, component,
                            elements * element_bytes);
  }
  Handle Host(v1::MemoryComponent component, int64_t elements) {
    return ledger_.Allocate(v1::MEMORY_POOL_HOST, component,
                            elements * kFloatBytes);
  }
  void Free(Handle& handle) { ledger_.Free(&handle); }
  bool offloaded() const {
    return job_.optimizer_offload != v1::OPTIMIZER_OFFLOAD_NONE;
  }

  // ---- Trainer::SetUp ----
  void SetUp() {
    ledger_.SetPhase("set-up");
    const int64_t parameters = state_.layout.total_elements();
    Device(kWeights, parameters);
    Device(kGradients, parameters);
    int64_t largest = 1;
    for (const ParameterInfo& info : state_.layout.parameters()) {
      largest = std::max(largest, info.elements);
    }
    Handle initialize =
        Host(kStaging, std::min(largest, kInitializeChunkElements));
    Free(initialize);
    if (Tiered(job_)) {
      SetUpTiered();
    } else {
      SetUpAdamW();
    }
  }

  void SetUpAdamW() {
    const int64_t owned = state_.owned_parameter_elements;
    if (!offloaded()) {
      Device(kOptimizer, owned);
      Device(kOptimizer, owned);
      return;
    }
    Host(kOptimizer, owned);
    Host(kOptimizer, owned);
    Host(kWeights, owned);
    Host(kStaging, std::max<int64_t>(
                       1, job_.optimizer_offload == v1::OPTIMIZER_OFFLOAD_SERIAL
                              ? owned
                              : kStreamStagingSlots *
                                    std::min(kOffloadBucketElements,
                                             state_.longest_owned_run)));
  }

  void SetUpTiered() {
    const v1::MemoryPool pool =
        offloaded() ? v1::MEMORY_POOL_HOST : v1::MEMORY_POOL_DEVICE;
    auto zeroed = [&](v1::MemoryPool where, v1::MemoryComponent component,
                      int64_t elements, int64_t element_bytes) {
      if (elements == 0) return;
      if (element_bytes == 2) elements += elements % 2;
      ledger_.Allocate(where, component, elements * element_bytes);
    };
    zeroed(pool, kOptimizer, state_.momentum_float32, kFloatBytes);
    zeroed(pool, kOptimizer, state_.momentum_bfloat16, 2);
    zeroed(pool, kOptimizer, state_.exact_second_moment, kFloatBytes);
    for (const int64_t statistics : state_.statistics) {
      zeroed(pool, kOptimizer, statistics, kFloatBytes);  // statistics
      zeroed(pool, kOptimizer, statistics, kFloatBytes);  // partial
      if (offloaded() && job_.world() > 1) {
        zeroed(v1::MEMORY_POOL_DEVICE, kStaging, statistics, kFloatBytes);
      }
    }
    if (!offloaded()) return;
    zeroed(v1::MEMORY_POOL_HOST, kWeights, state_.owned_parameter_elements,
           kFloatBytes);
    zeroed(v1::MEMORY_POOL_HOST, kStaging, state_.owned_parameter_elements,
           kFloatBytes);
  }

  // ---- TrainingStep::Run ----
  void Step() {
    const bool first = rank_.pp == 0;
    const bool last = rank_.pp == job_.pp - 1;
    const int64_t m = job_.micro_batches;
    // StageLinks' buffers for the previous stage's output and the next
    // one's input gradient.
    auto receive = [&]() {
      return ledger_.Allocate(
          engine::ResidualStreamBuffer(config_, step_.sequences));
    };
    const int64_t warmup = std::min<int64_t>(job_.pp - rank_.pp - 1, m);
    const int64_t steady = m - warmup;
    int64_t next_forward = 0, next_backward = 0;
    for (int64_t i = 0; i < warmup; ++i, ++next_forward) {
      Handle input = first ? 0 : receive();
      Handle output = model_.Forward(next_forward, step_, input);
      Free(output);  // sent on
    }
    Handle input = steady > 0 && !first ? receive() : 0;
    for (int64_t i = 0; i < steady; ++i, ++next_backward) {
      Handle output = model_.Forward(next_forward, step_, input);
      Handle output_gradient = last ? 0 : receive();
      ++next_forward;
      Free(output);
      Handle input_gradient = model_.Backward(next_backward, output_gradient);
      if (i + 1 < steady && !first) input = receive();
      Free(input_gradient);
    }
    for (int64_t i = 0; i < warmup; ++i, ++next_backward) {
      Handle output_gradient = last ? 0 : receive();
      Handle input_gradient = model_.Backward(next_backward, output_gradient);
      Free(input_gradient);
    }
    ledger_.SetPhase("gradient reduce-scatter");
    for (const Region& region : state_.regions) {
      if (region.group_size == 1 || region.elements == 0) continue;
      Handle shard = Device(kGradients, region.shard_elements());
      Free(shard);
    }
    ledger_.SetPhase("weight all-gather");
    for (const Region& region : state_.regions) {
      if (region.group_size == 1 || region.elements == 0) continue;
      Handle shard = Device(kStaging, region.shard_elements());
      Free(shard);
    }
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
                       : ledger_.Allocate(engine::ResidualStreamBuffer(
                             config_, pass.sequences));
    model_.Evaluate(pass, input);
  }

  // The most validation windows expert rank `ep` of this rank's group
  // takes in one round: rounds of rank_sequences per batch rank, a
  // remainder too small for every rank joining the round before it (its
  // first ranks one window more). Without the count of windows, any round
  // may have a remainder.
  int64_t EvaluationSequences(int ep) const {
    const int64_t batch_ranks = int64_t{job_.ep} * job_.dp;
    const int64_t batch_index = ep + int64_t{job_.ep} * rank_.dp;
    const int64_t windows = job_.validation_windows;
    if (windows <= 0) {
      return job_.rank_sequences + (batch_ranks > 1 ? 1 : 0);
    }
    int64_t most = 0;
    for (int64_t first = 0; first < windows;) {
      int64_t round =
          std::min(batch_ranks * job_.rank_sequences, windows - first);
      const int64_t after = windows - first - round;
      if (after > 0 && after < batch_ranks) round += after;
      const int64_t count =
          round / batch_ranks + (batch_index < round % batch_ranks ? 1 : 0);
      most = std::max(most, count);
      first += round;
    }
    return most;
  }

  // ---- Trainer::WriteCheckpoint: rank 0 assembles the whole model and
  // optimizer state in host memory; every other rank sends its pieces
  // packed in a device buffer, one rank at a time ----
  void Checkpoint() {
    ledger_.SetPhase("checkpoint");
    if (rank_.rank(job_) != 0) {
      Handle packed =
          Device(kStaging, std::max<int64_t>(1, state_.weight_pieces));
      Free(packed);
      packed = Device(kStaging, std::max<int64_t>(1, state_.optimizer_pieces));
      Free(packed);
      return;
    }
    const auto [weights, optimizer] = WholeCheckpointElements(job_);
    // The largest pieces another rank sends are among the distinct ranks'.
    std::vector<RankState> others;
    for (const RankIndex& other : DistinctRanks(job_)) {
      if (other.rank(job_) != 0) others.push_back(RankStateOf(job_, other));
    }
    Handle weight_snapshot = Host(kStaging, weights);
    for (const RankState& other : others) {
      Handle packed =
          Device(kStaging, std::max<int64_t>(1, other.weight_pieces));
      Free(packed);
    }
    Handle optimizer_snapshot = Host(kStaging, optimizer);
    for (const RankState& other : others) {
      Handle packed =
          Device(kStaging, std::max<int64_t>(1, other.optimizer_pieces));
      Free(packed);
    }
    Free(optimizer_snapshot);
    Free(weight_snapshot);
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
  std::vector<RankIndex> ranks;
  for (int pp = 0; pp < job.pp; ++pp) {
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
