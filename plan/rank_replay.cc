#include "plan/rank_replay.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/memory/dtype.h"
#include "engine/model/expert_spill_plan.h"
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
constexpr v1::MemoryComponent kDispatch = v1::MEMORY_COMPONENT_DISPATCH;
constexpr v1::MemoryComponent kVocab = v1::MEMORY_COMPONENT_VOCAB_PROJECTION;
constexpr v1::MemoryComponent kCheckpoint = v1::MEMORY_COMPONENT_CHECKPOINT;
constexpr v1::MemoryComponent kAttention = v1::MEMORY_COMPONENT_ATTENTION;
constexpr v1::MemoryComponent kActivations = v1::MEMORY_COMPONENT_ACTIVATIONS;
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

// What one rank sends and receives in one layer's dispatch.
struct DispatchShape {
  // Unchunked: this rank's copies (rows sent) and the rows its experts
  // receive.
  int64_t sent_rows = 0;
  int64_t received_rows = 0;
  // Chunked (PipelinedLLEP): the chunk count and the rows of chunk c (at
  // most).
  int64_t chunks = 0;
  std::vector<int64_t> chunk_sent_rows;
  std::vector<int64_t> chunk_received_rows;
  // LLEP: experts this rank borrows and lends in the layer.
  int64_t borrowed = 0;
  int64_t lent = 0;
};

// `tokens[s]`: the micro-batch tokens of the expert group's rank s.
DispatchShape DispatchShapeOf(const ReplayJob& job,
                              const std::vector<double>& load, int self,
                              const std::vector<int64_t>& tokens) {
  const engine::ModelConfig& config = job.config;
  const int ranks = job.ep;
  const int64_t experts = config.experts;
  const int64_t local = experts / ranks;
  // counts[s * experts + e]: source s's copies for expert e.
  std::vector<int64_t> counts;
  for (int s = 0; s < ranks; ++s) {
    const std::vector<int64_t> source =
        SourceCounts(tokens[s] * config.top_k, load);
    counts.insert(counts.end(), source.begin(), source.end());
  }
  DispatchShape shape;
  shape.sent_rows = tokens[self] * config.top_k;
  for (int s = 0; s < ranks; ++s) {
    for (int64_t e = self * local; e < (self + 1) * local; ++e) {
      shape.received_rows += counts[s * experts + e];
    }
  }
  if (config.dispatch_chunk_tokens <= 0) return shape;

  // DispatchChunks::Split: every (source, destination) list, K, and this
  // rank's lists.
  const std::vector<engine::ExpertSpill> spills =
      engine::PlanExpertSpill(counts, ranks, experts);
  std::vector<int64_t> spilled(ranks * experts, 0);
  for (const engine::ExpertSpill& spill : spills) {
    for (int s = 0; s < ranks; ++s) {
      spilled[s * experts + spill.expert] = spill.copies[s];
    }
    if (spill.owner == self) ++shape.lent;
  }
  shape.borrowed =
      static_cast<int64_t>(engine::SpillsBorrowedBy(spills, self).size());
  // length[s * ranks + r]: source s's list for destination r.
  std::vector<int64_t> length(ranks * ranks, 0);
  int64_t longest = 0;
  for (int s = 0; s < ranks; ++s) {
    for (int r = 0; r < ranks; ++r) {
      int64_t& list = length[s * ranks + r];
      for (int64_t e = r * local; e < (r + 1) * local; ++e) {
        list += counts[s * experts + e] - spilled[s * experts + e];
      }
      for (const engine::ExpertSpill* spill :
           engine::SpillsBorrowedBy(spills, r)) {
        list += spilled[s * experts + spill->expert];
      }
      longest = std::max(longest, list);
    }
  }
  // Every rank derives K from the lists' real lengths, which vary around
  // these expected ones, and a chunk holds at most `cap` copies of each
  // list. Sizing each chunk by min(cap, list) bounds it whatever the
  // variation; where a list just overflows K - 1 chunks it over-states the
  // chunk by up to K / (K - 1).
  const int64_t cap = config.dispatch_chunk_tokens;
  shape.chunks = std::max<int64_t>(1, (longest + cap - 1) / cap);
  int64_t sent = 0, received = 0;
  for (int r = 0; r < ranks; ++r) {
    sent += std::min(cap, length[self * ranks + r]);
    received += std::min(cap, length[r * ranks + self]);
  }
  shape.chunk_sent_rows.assign(shape.chunks, sent);
  shape.chunk_received_rows.assign(shape.chunks, received);
  return shape;
}

// The dispatch of each of a shard's layers.
std::vector<DispatchShape> DispatchShapesOf(
    const ReplayJob& job, const engine::ModelShard& shard, int self,
    const std::vector<int64_t>& tokens) {
  std::vector<DispatchShape> shapes;
  for (int64_t l = 0; l < shard.layer_count; ++l) {
    const std::vector<double>& load =
        job.layer_expert_load.size() == 1
            ? job.layer_expert_load[0]
            : job.layer_expert_load[shard.first_layer + l];
    shapes.push_back(DispatchShapeOf(job, load, self, tokens));
  }
  return shapes;
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
        tokens_(job.rank_sequences * job.config.seq_len),
        expert_group_tokens_(job.ep, tokens_),
        dispatch_(DispatchShapesOf(job, state_.shard, rank.ep,
                                   expert_group_tokens_)) {}

  void Run() {
    SetUp();
    Step();
    if (job_.evaluates) Evaluate();
    Checkpoint();
  }

 private:
  // The tensors a block keeps between its forward and backward.
  using Saved = std::vector<Handle>;

  Handle Device(v1::MemoryComponent component, int64_t elements,
                int64_t element_bytes = kFloatBytes) {
    return ledger_.Allocate(v1::MEMORY_POOL_DEVICE, component,
                            elements * element_bytes);
  }
  Handle Host(v1::MemoryComponent component, int64_t elements) {
    return ledger_.Allocate(v1::MEMORY_POOL_HOST, component,
                            elements * kFloatBytes);
  }
  void Free(Handle& handle) {
    ledger_.Free(handle);
    handle = 0;
  }
  void Free(Saved& saved) {
    for (Handle& handle : saved) Free(handle);
    saved.clear();
  }
  int64_t layers() const { return state_.shard.layer_count; }
  const DispatchShape& dispatch() const { return *layer_dispatch_; }
  bool expert_parallel() const { return job_.ep > 1; }
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
    const int64_t d = config_.d_model;
    auto receive = [&]() { return Device(kActivations, tokens_ * d); };
    const int64_t warmup = std::min<int64_t>(job_.pp - rank_.pp - 1, m);
    const int64_t steady = m - warmup;
    int64_t next_forward = 0, next_backward = 0;
    for (int64_t i = 0; i < warmup; ++i, ++next_forward) {
      Handle input = first ? 0 : receive();
      Handle output = Forward(next_forward, input);
      Free(output);  // sent on
    }
    Handle input = steady > 0 && !first ? receive() : 0;
    for (int64_t i = 0; i < steady; ++i, ++next_backward) {
      Handle output = Forward(next_forward, input);
      Handle output_gradient = last ? 0 : receive();
      ++next_forward;
      Free(output);
      Handle input_gradient = Backward(next_backward, output_gradient);
      if (i + 1 < steady && !first) input = receive();
      Free(input_gradient);
    }
    for (int64_t i = 0; i < warmup; ++i, ++next_backward) {
      Handle output_gradient = last ? 0 : receive();
      Handle input_gradient = Backward(next_backward, output_gradient);
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

  // One micro-batch in flight: Model::MicroBatch.
  struct MicroBatch {
    Handle input_ids = 0, target_ids = 0;
    std::vector<Handle> boundary;   // device, checkpoint (or received)
    std::vector<Handle> offloaded;  // SCO host copies
    std::vector<Saved> kept;        // without activation checkpointing
    Saved head;
  };

  // ---- Model::Forward; returns the stage output (not the last stage) ----
  Handle Forward(int64_t id, Handle input) {
    const int64_t n = tokens_, d = config_.d_model;
    MicroBatch& batch = in_flight_[id];
    ledger_.SetPhase(absl::StrCat("micro-batch ", id, " forward"));
    batch.input_ids = Device(kActivations, n);
    batch.target_ids = Device(kActivations, n);
    batch.boundary.assign(layers() + 1, 0);
    batch.boundary[0] =
        state_.shard.has_embedding ? Device(kCheckpoint, n * d) : input;
    const bool keep = !config_.activation_checkpointing;
    const bool offload = config_.offload_checkpoints;
    batch.kept.assign(keep ? layers() : 0, {});
    if (offload) {
      batch.offloaded.assign(layers(), 0);
      if (layers() > 0) batch.offloaded[0] = Host(kCheckpoint, n * d);
    }
    for (int64_t l = 0; l < layers(); ++l) {
      ledger_.SetPhase(absl::StrCat("micro-batch ", id, " forward, layer ",
                                    state_.shard.first_layer + l));
      batch.boundary[l + 1] = Device(kCheckpoint, n * d);
      layer_dispatch_ = &dispatch_[l];
      Saved transient;
      LayerForward(/*combine=*/true, keep ? &batch.kept[l] : &transient);
      Free(transient);
      if (offload) {
        if (l + 1 < layers()) batch.offloaded[l + 1] = Host(kCheckpoint, n * d);
        Free(batch.boundary[l]);
      }
    }
    if (!state_.shard.has_head) {
      Handle output = batch.boundary[layers()];
      batch.boundary[layers()] = 0;
      return output;
    }
    ledger_.SetPhase(absl::StrCat("micro-batch ", id, " output head forward"));
    HeadForward(&batch.head);
    return 0;
  }

  // ---- Model::Backward; returns the input gradient (not the first
  // stage) ----
  Handle Backward(int64_t id, Handle output_gradient) {
    const int64_t n = tokens_, d = config_.d_model;
    MicroBatch batch = std::move(in_flight_[id]);
    in_flight_.erase(id);
    const bool offload = config_.offload_checkpoints;
    if (offload && layers() > 0) {
      batch.boundary[layers() - 1] = Device(kCheckpoint, n * d);
    }
    Handle gradient = output_gradient;
    if (state_.shard.has_head) {
      ledger_.SetPhase(
          absl::StrCat("micro-batch ", id, " output head backward"));
      gradient = Device(kActivations, n * d);
      HeadBackward(&batch.head);
      Free(batch.boundary[layers()]);
    }
    Handle next_gradient = Device(kActivations, n * d);
    for (int64_t l = layers() - 1; l >= 0; --l) {
      ledger_.SetPhase(absl::StrCat("micro-batch ", id, " backward, layer ",
                                    state_.shard.first_layer + l));
      if (offload) {
        Free(batch.offloaded[l]);
        if (l > 0) batch.boundary[l - 1] = Device(kCheckpoint, n * d);
      }
      layer_dispatch_ = &dispatch_[l];
      Saved recomputed;
      Saved& saved =
          config_.activation_checkpointing ? recomputed : batch.kept[l];
      if (config_.activation_checkpointing) {
        LayerForward(/*combine=*/false, &recomputed);
      }
      LayerBackward(&saved);
      Free(recomputed);
      Free(batch.boundary[l]);
      std::swap(gradient, next_gradient);
    }
    Free(next_gradient);
    Free(batch.input_ids);
    Free(batch.target_ids);
    for (Saved& saved : batch.kept) Free(saved);
    if (state_.shard.has_embedding) {
      Free(gradient);
      return 0;
    }
    return gradient;
  }

  // TransformerLayerForward: saved = [mid, attention..., moe...]. Without
  // `combine` (a recompute) the MoE block stops before its experts when the
  // dispatch is chunked, as the engine's does.
  void LayerForward(bool combine, Saved* saved) {
    const int64_t n = tokens_, d = config_.d_model;
    const int64_t k = config_.top_k, e = config_.experts;
    saved->push_back(Device(kActivations, n * d));  // mid
    // AttentionBlockForward: normed, inverse_rms, qkv, context, logsumexp.
    saved->push_back(Device(kActivations, n * d));
    saved->push_back(Device(kActivations, n));
    saved->push_back(Device(kAttention, 3 * n * d));
    saved->push_back(Device(kAttention, n * d));
    saved->push_back(Device(kAttention, n * config_.heads));
    // MoeBlockForward: normed, inverse_rms; RouteTokens (its logits are
    // transient): probs, expert_index, gates; PlanDispatch: two int32
    // arrays.
    saved->push_back(Device(kActivations, n * d));
    saved->push_back(Device(kActivations, n));
    Handle logits = Device(kActivations, n * e);
    saved->push_back(Device(kActivations, n * e));
    saved->push_back(Device(kActivations, n * k));
    saved->push_back(Device(kActivations, n * k));
    Free(logits);
    Saved plan = {Device(kDispatch, n * k), Device(kDispatch, n * k)};
    if (config_.dispatch_chunk_tokens > 0) {
      Free(plan);
      if (combine) PipelinedExpertsForward();
      return;
    }
    saved->insert(saved->end(), plan.begin(), plan.end());
    // GatherTokens, SendToExperts, ExpertsForward, ReturnFromExperts.
    const int64_t sent = dispatch().sent_rows;
    const int64_t received = dispatch().received_rows;
    const int64_t f = config_.ffn_hidden;
    saved->push_back(Exchange(Device(kDispatch, sent * d), received));
    for (int i = 0; i < 3; ++i) {  // gate, up, hidden
      saved->push_back(Device(kDispatch, received * f));
    }
    saved->push_back(Exchange(Device(kDispatch, received * d), sent));
  }

  // SendToExperts and ReturnFromExperts: with expert parallelism `sent`'s
  // rows arrive elsewhere as `rows` rows in a new buffer, and `sent` goes;
  // on one rank they stay where they are.
  Handle Exchange(Handle sent, int64_t rows) {
    if (!expert_parallel()) return sent;
    Handle received = Device(kDispatch, rows * config_.d_model);
    Free(sent);
    return received;
  }

  // One dispatched chunk: its plan's two int32 arrays and received rows.
  struct Chunk {
    Handle assignment = 0, row_token = 0, received = 0;
  };

  // ChunkDispatcher::Dispatch of chunk c.
  Chunk DispatchChunk(int64_t c) {
    const int64_t d = config_.d_model;
    const int64_t sent = dispatch().chunk_sent_rows[c];
    Chunk chunk;
    chunk.assignment = Device(kDispatch, tokens_ * config_.top_k);
    chunk.row_token = Device(kDispatch, sent);
    chunk.received = Exchange(Device(kDispatch, sent * d),
                              dispatch().chunk_received_rows[c]);
    return chunk;
  }
  void FreeChunk(Chunk& chunk) {
    Free(chunk.assignment);
    Free(chunk.row_token);
    Free(chunk.received);
  }
  // With expert parallelism the next chunk's exchange runs on a helper
  // thread while this one's experts compute: the worst case has it done
  // (its received rows held) and its gathered rows still held.
  Chunk Prefetch(int64_t next, Handle* rows_in_flight) {
    *rows_in_flight = 0;
    if (!expert_parallel() || next >= dispatch().chunks) return {};
    *rows_in_flight =
        Device(kDispatch, dispatch().chunk_sent_rows[next] * config_.d_model);
    return DispatchChunk(next);
  }

  // BorrowExperts: the borrowed matrices, and one packed matrix set at a
  // time for the exchange.
  Saved BorrowExperts() {
    const int64_t matrix = config_.ffn_hidden * config_.d_model;
    Saved borrowed = {Device(kDispatch, dispatch().borrowed * matrix),
                      Device(kDispatch, dispatch().borrowed * matrix),
                      Device(kDispatch, dispatch().borrowed * matrix)};
    for (int i = 0; i < 3; ++i) {
      Handle packed = Device(kDispatch, dispatch().lent * matrix);
      Free(packed);
    }
    return borrowed;
  }

  void PipelinedExpertsForward() {
    const int64_t d = config_.d_model, f = config_.ffn_hidden;
    Saved borrowed = BorrowExperts();
    Chunk chunk = DispatchChunk(0);
    for (int64_t c = 0; c < dispatch().chunks; ++c) {
      Handle rows_in_flight = 0;
      Chunk next = Prefetch(c + 1, &rows_in_flight);
      const int64_t received = dispatch().chunk_received_rows[c];
      Saved transient = {Device(kDispatch, received * f),
                         Device(kDispatch, received * f),
                         Device(kDispatch, received * f)};
      Handle output = Device(kDispatch, received * d);
      Free(transient);
      Free(rows_in_flight);
      Free(chunk.received);
      Handle returned = Exchange(output, dispatch().chunk_sent_rows[c]);
      Free(returned);
      FreeChunk(chunk);
      chunk = c + 1 < dispatch().chunks
                  ? (expert_parallel() ? next : DispatchChunk(c + 1))
                  : Chunk();
    }
    Free(borrowed);
  }

  void PipelinedExpertsBackward() {
    const int64_t d = config_.d_model, f = config_.ffn_hidden;
    const int64_t matrix = f * d;
    Saved borrowed = BorrowExperts();
    Saved borrowed_gradients = {
        Device(kDispatch, dispatch().borrowed * matrix),
        Device(kDispatch, dispatch().borrowed * matrix),
        Device(kDispatch, dispatch().borrowed * matrix)};
    Chunk chunk = DispatchChunk(0);
    for (int64_t c = 0; c < dispatch().chunks; ++c) {
      Handle rows_in_flight = 0;
      Chunk next = Prefetch(c + 1, &rows_in_flight);
      const int64_t received = dispatch().chunk_received_rows[c];
      const int64_t sent = dispatch().chunk_sent_rows[c];
      Handle gate = Device(kDispatch, received * f);
      Handle up = Device(kDispatch, received * f);
      Handle hidden = Device(kDispatch, received * f);
      Handle output = Device(kDispatch, received * d);
      Free(rows_in_flight);
      Handle returned = Exchange(output, sent);
      Handle d_returned = Device(kDispatch, sent * d);
      Free(returned);
      Handle d_output = Exchange(d_returned, received);
      Handle d_rows = ExpertsBackward(received, sent, &chunk.received, &gate,
                                      &up, &hidden, &d_output);
      Free(d_rows);
      FreeChunk(chunk);
      chunk = c + 1 < dispatch().chunks
                  ? (expert_parallel() ? next : DispatchChunk(c + 1))
                  : Chunk();
    }
    // ReturnBorrowedGradients.
    if (dispatch().borrowed > 0 || dispatch().lent > 0) {
      Handle returned = Device(kDispatch, dispatch().lent * matrix);
      for (Handle& gradient : borrowed_gradients) {
        Handle packed = Device(kDispatch, dispatch().borrowed * matrix);
        Free(packed);
        Free(gradient);
      }
      Free(returned);
    }
    Free(borrowed_gradients);
    Free(borrowed);
  }

  // ExpertsBackward, then ReturnFromExperts of the input gradient: frees
  // the expert input, its activations and d_output; returns the gradient
  // rows back at their tokens' rank (`sent` of them).
  Handle ExpertsBackward(int64_t received, int64_t sent, Handle* input,
                         Handle* gate, Handle* up, Handle* hidden,
                         Handle* d_output) {
    const int64_t d = config_.d_model, f = config_.ffn_hidden;
    Handle d_hidden = Device(kDispatch, received * f);
    Free(*d_output);
    Free(*hidden);
    Handle d_gate = Device(kDispatch, received * f);
    Handle d_up = Device(kDispatch, received * f);
    Free(d_hidden);
    Free(*gate);
    Free(*up);
    Handle d_input = Device(kDispatch, received * d);
    Free(*input);
    Free(d_gate);
    Free(d_up);
    return Exchange(d_input, sent);
  }

  // TransformerLayerBackward over `saved` (LayerForward's order).
  void LayerBackward(Saved* saved) {
    const int64_t n = tokens_, d = config_.d_model;
    const int64_t k = config_.top_k, e = config_.experts;
    // Positions in `saved`: mid, attention (5), moe normed, inverse_rms,
    // routing (3), then the unchunked dispatch's plan (2), input, gate, up,
    // hidden, output.
    Saved& s = *saved;
    Handle d_gates = Device(kActivations, n * k);
    Handle d_normed = 0;
    if (config_.dispatch_chunk_tokens > 0) {
      d_normed = Device(kActivations, n * d);
      PipelinedExpertsBackward();
    } else {
      // CombineTokensBackward, SendToExperts, ExpertsBackward,
      // ReturnFromExperts; d_normed is made only once the rows are back.
      const int64_t sent = dispatch().sent_rows;
      const int64_t received = dispatch().received_rows;
      Handle d_rows = Device(kDispatch, sent * d);
      Free(s[17]);  // expert output
      Handle d_output = Exchange(d_rows, received);
      Handle d_expert_input = ExpertsBackward(received, sent, &s[13], &s[14],
                                              &s[15], &s[16], &d_output);
      d_normed = Device(kActivations, n * d);
      Free(d_expert_input);
      Free(s[11]);  // the plan
      Free(s[12]);
    }
    // RouterBackward, then the routing and the normed input go.
    Handle d_logits = Device(kActivations, n * e);
    Free(d_logits);
    Free(s[8]);
    Free(s[9]);
    Free(s[10]);
    Free(s[6]);  // moe normed
    Free(d_gates);
    Free(d_normed);
    Free(s[0]);  // mid
    // AttentionBlockBackward.
    Handle d_qkv = Device(kAttention, 3 * n * d);
    Free(s[4]);  // context
    Free(s[5]);  // logsumexp
    Free(s[3]);  // qkv
    Free(d_qkv);
    Free(s[1]);  // attention normed
  }

  // OutputHeadForward; `head` keeps normed, inverse_rms, logsumexp (and
  // the plain head's logits) for backward.
  void HeadForward(Saved* head) {
    const int64_t n = tokens_, d = config_.d_model;
    *head = {Device(kActivations, n * d), Device(kActivations, n),
             Device(kVocab, n)};
    if (config_.vocab_block > 0) {
      Handle target_logits = Device(kVocab, n);
      RingPass(/*backward=*/false);
      Free(target_logits);
      return;
    }
    head->push_back(Device(kVocab, n * config_.vocab));  // logits
    Handle losses = Device(kVocab, n);
    Free(losses);
  }

  void HeadBackward(Saved* head) {
    const int64_t n = tokens_, d = config_.d_model;
    Handle d_normed = Device(kActivations, n * d);
    if (config_.vocab_block > 0) RingPass(/*backward=*/true);
    Free(*head);
    Free(d_normed);
  }

  // RingForward / RingBackward: the logits block, and the ring's buffers
  // when the vocabulary is sharded over the expert ranks.
  void RingPass(bool backward) {
    const int64_t n = tokens_, d = config_.d_model;
    const int64_t block = config_.vocab_block;
    Saved buffers;
    if (!state_.shard.head_sharded) {
      buffers.push_back(Device(kVocab, n * block));
      Free(buffers);
      return;
    }
    int64_t most_rows = 0;
    for (int r = 0; r < job_.ep; ++r) {
      most_rows = std::max(
          most_rows,
          engine::ModelShard::VocabShardBegin(config_.vocab, r + 1, job_.ep) -
              engine::ModelShard::VocabShardBegin(config_.vocab, r, job_.ep));
    }
    // VocabRing::Agree moves the smaller of the largest token block and
    // the largest weight shard.
    const int64_t most_tokens = *std::max_element(expert_group_tokens_.begin(),
                                                  expert_group_tokens_.end());
    const int64_t floats_per_token = backward ? 2 * d + 2 : d + 3;
    const int64_t floats_per_row = backward ? 2 * d : d;
    const bool move_tokens =
        most_tokens * floats_per_token < most_rows * floats_per_row;
    buffers.push_back(Device(kVocab, (move_tokens ? most_tokens : n) * block));
    for (int i = 0; i < 2; ++i) {
      if (!move_tokens) {
        buffers.push_back(Device(kVocab, most_rows * d));
        if (backward) buffers.push_back(Device(kVocab, most_rows * d));
        continue;
      }
      const int64_t t = most_tokens;
      buffers.push_back(Device(kVocab, t * d));  // hidden
      buffers.push_back(Device(kVocab, t));      // targets
      buffers.push_back(Device(kVocab, t));      // logsumexp
      // target logits (forward) or the hidden gradient (backward)
      buffers.push_back(Device(kVocab, backward ? t * d : t));
    }
    Free(buffers);
  }

  // ---- EvaluateWindows: the largest round of a validation pass on this
  // rank, forward only (Model::EvaluateStage) ----
  void Evaluate() {
    for (int r = 0; r < job_.ep; ++r) {
      expert_group_tokens_[r] = EvaluationSequences(r) * config_.seq_len;
    }
    tokens_ = expert_group_tokens_[rank_.ep];
    if (tokens_ == 0) return;
    ledger_.SetPhase("validation");
    dispatch_ =
        DispatchShapesOf(job_, state_.shard, rank_.ep, expert_group_tokens_);
    const int64_t n = tokens_, d = config_.d_model;
    Handle input = state_.shard.has_embedding ? 0 : Device(kActivations, n * d);
    Handle input_ids = Device(kActivations, n);
    Handle target_ids = Device(kActivations, n);
    Handle boundary =
        state_.shard.has_embedding ? Device(kActivations, n * d) : input;
    for (int64_t l = 0; l < layers(); ++l) {
      Handle next = Device(kActivations, n * d);
      layer_dispatch_ = &dispatch_[l];
      Saved transient;
      LayerForward(/*combine=*/true, &transient);
      Free(transient);
      Free(boundary);
      boundary = next;
    }
    if (state_.shard.has_head) {
      Saved head;
      HeadForward(&head);
      Free(head);
    }
    Free(boundary);  // the head's input, or the output sent on
    Free(input_ids);
    Free(target_ids);
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
  // The tokens of the current pass's micro-batch on this rank and on each
  // rank of its expert group (they differ in a validation round), and each
  // of the shard's layers' dispatch for them.
  int64_t tokens_;
  std::vector<int64_t> expert_group_tokens_;
  std::vector<DispatchShape> dispatch_;
  const DispatchShape* layer_dispatch_ = nullptr;
  std::map<int64_t, MicroBatch> in_flight_;
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
