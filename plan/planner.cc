#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_size.h"
#include "engine/model/model_config.h"
#include "plan/memory_model.h"
#include "proto/job_spec.h"

namespace plateau::plan {
namespace {

// Throughput costs the search weighs the schedules by, of the size each
// alone costs the example model where its products run at speed (0-9%:
// docs/BENCHMARKS.md, "Throughput cost"); PipelinedLLEP's is taken as 2% a
// chunk. Serial offload is never chosen: the stream holds the same state.
constexpr double kRingDtpCost = 0.035;
constexpr double kScoCost = 0.04;
constexpr double kOffloadCost = 0.035;
constexpr double kCostPerChunk = 0.02;
// Chunk caps tried: the copies a rank sends to one expert rank over 2^i.
constexpr int kChunkHalvings = 10;

std::string ComponentName(v1::MemoryComponent component) {
  return SpecEnumName(*v1::MemoryComponent_descriptor(), component);
}

// The step without schedules, and so without bf16 gradient accumulation,
// which needs the optimizer offloaded.
void SetNoSchedules(v1::JobSpec* spec) {
  v1::ScheduleSpec& schedules = *spec->mutable_schedules();
  schedules.set_dispatch_chunk_tokens(0);
  schedules.set_ring_dtp(false);
  schedules.set_sco(false);
  schedules.set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_NONE);
  spec->clear_gradient_accumulation();
}

// Tokens each rank sends to one expert rank in a layer, routed uniformly.
int64_t CopiesPerExpertRank(const v1::JobSpec& spec) {
  const int64_t sequences = spec.data().batch_tokens() /
                            spec.model().seq_len() /
                            (MicroBatchesOf(spec.train()) *
                             spec.parallel().ep() * spec.parallel().dp());
  return std::max<int64_t>(1, sequences * spec.model().seq_len() *
                                  spec.model().top_k() / spec.parallel().ep());
}

double ThroughputCost(const v1::JobSpec& spec) {
  const v1::ScheduleSpec& schedules = spec.schedules();
  double cost = 0.0;
  if (schedules.dispatch_chunk_tokens() > 0) {
    const int64_t per_rank = CopiesPerExpertRank(spec);
    const int64_t chunks = (per_rank + schedules.dispatch_chunk_tokens() - 1) /
                           schedules.dispatch_chunk_tokens();
    cost += kCostPerChunk * static_cast<double>(std::max<int64_t>(1, chunks));
  }
  if (schedules.ring_dtp()) cost += kRingDtpCost;
  if (schedules.sco()) cost += kScoCost;
  if (schedules.optimizer_offload() != v1::OPTIMIZER_OFFLOAD_NONE) {
    cost += kOffloadCost;
  }
  return cost;
}

// The candidate schedules of an auto spec: each field the spec pins takes
// only its pinned value.
std::vector<v1::ScheduleSpec> Candidates(const v1::JobSpec& spec) {
  const v1::ScheduleSpec& pinned = spec.schedules();
  std::vector<int64_t> caps;
  if (pinned.has_dispatch_chunk_tokens()) {
    caps.push_back(pinned.dispatch_chunk_tokens());
  } else {
    caps.push_back(0);
    const int64_t per_rank = CopiesPerExpertRank(spec);
    for (int i = 0; i <= kChunkHalvings; ++i) {
      const int64_t cap = std::max<int64_t>(1, per_rank >> i);
      if (caps.back() != cap) caps.push_back(cap);
    }
  }
  std::vector<bool> rings = pinned.has_ring_dtp()
                                ? std::vector<bool>{pinned.ring_dtp()}
                                : std::vector<bool>{false, true};
  std::vector<bool> scos = {false};
  if (pinned.has_sco()) {
    scos = {pinned.sco()};
  } else if (pinned.activation_checkpointing()) {
    scos = {false, true};
  }
  std::vector<v1::OptimizerOffload> offloads =
      pinned.optimizer_offload() != v1::OPTIMIZER_OFFLOAD_UNSPECIFIED
          ? std::vector<v1::OptimizerOffload>{pinned.optimizer_offload()}
          : std::vector<v1::OptimizerOffload>{v1::OPTIMIZER_OFFLOAD_NONE,
                                              v1::OPTIMIZER_OFFLOAD_STREAM};
  std::vector<v1::ScheduleSpec> candidates;
  for (int64_t cap : caps) {
    for (bool ring : rings) {
      for (bool sco : scos) {
        for (v1::OptimizerOffload offload : offloads) {
          v1::ScheduleSpec candidate = pinned;
          candidate.set_dispatch_chunk_tokens(cap);
          candidate.set_ring_dtp(ring);
          candidate.set_sco(sco);
          candidate.set_optimizer_offload(offload);
          candidates.push_back(candidate);
        }
      }
    }
  }
  return candidates;
}

absl::StatusOr<v1::JobSpec> OnDevices(const v1::JobSpec& spec, int devices) {
  if (devices <= 0) return spec;
  const int model_ranks = spec.parallel().ep() * spec.parallel().pp();
  if (devices % model_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--devices ", devices,
        " is not a multiple of parallel.ep x parallel.pp = ", model_ranks,
        "; data parallelism takes the rest"));
  }
  v1::JobSpec scaled = spec;
  scaled.mutable_resources()->clear_min_nodes();  // planned for `devices`
  scaled.mutable_parallel()->set_dp(devices / model_ranks);
  // As many nodes of the spec's size as the devices make; fewer devices
  // than that fit on one node.
  const int per_node = spec.resources().devices_per_node();
  if (devices % per_node == 0) {
    scaled.mutable_resources()->set_nodes(devices / per_node);
  } else if (devices < per_node) {
    scaled.mutable_resources()->set_nodes(1);
    scaled.mutable_resources()->set_devices_per_node(devices);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--devices ", devices, " is not a whole number of the spec's nodes of ",
        per_node, " devices (resources.devices_per_node)"));
  }
  return scaled;
}

// The largest value in [1, limit] for which `fits` holds, assuming it holds
// for every smaller one; 0 when it fails at 1. The search starts at `start`
// (the spec's own value, usually near the answer) and doubles or halves
// from there; an error counts as not fitting.
int64_t LargestFitting(int64_t start, int64_t limit,
                       const std::function<bool(int64_t)>& fits) {
  int64_t good = 0, bad = 0;
  limit = std::max<int64_t>(1, limit);
  start = std::clamp<int64_t>(start, 1, limit);
  if (fits(start)) {
    good = start;
    while (bad == 0) {
      if (good == limit) return limit;
      const int64_t next = std::min(limit, good * 2);
      (fits(next) ? good : bad) = next;
    }
  } else {
    bad = start;
    while (good == 0) {
      if (bad == 1) return 0;
      const int64_t next = bad / 2;
      (fits(next) ? good : bad) = next;
    }
  }
  // Within 1/64 of the answer: each try is a whole replay.
  while (bad - good > std::max<int64_t>(1, good / 64)) {
    const int64_t middle = good + (bad - good) / 2;
    (fits(middle) ? good : bad) = middle;
  }
  return good;
}

// A spec the rules refuse (its sizes past their bounds) does not fit: the
// reach searches stay among specs that can be submitted, whose replay is
// bounded.
bool Fits(const v1::JobSpec& spec, const Routing& routing, int64_t usable) {
  if (!ValidateJobSpec(spec).ok()) return false;
  absl::StatusOr<std::optional<v1::MemoryPrediction>> prediction =
      PredictMemoryWithin(spec, routing, usable);
  return prediction.ok() && prediction->has_value();
}

// data.batch_tokens stays a whole number of sequences per rank and
// micro-batch, as the engine needs.
int64_t SequenceUnit(const v1::JobSpec& spec) {
  return int64_t{MicroBatchesOf(spec.train())} * spec.parallel().ep() *
         spec.parallel().dp();
}

struct Reach {
  int64_t seq_len = 0;
  int64_t batch_tokens = 0;
};

Reach ReachOf(const v1::JobSpec& spec, const Routing& routing, int64_t usable) {
  const int64_t seq_len = spec.model().seq_len();
  const int64_t sequences = spec.data().batch_tokens() / seq_len;
  const int64_t unit = SequenceUnit(spec);
  Reach reach;
  reach.seq_len = LargestFitting(
      seq_len, std::min(kMaxSpecSeqLen, kMaxSpecBatchTokens / sequences),
      [&](int64_t length) {
        v1::JobSpec longer = spec;
        longer.mutable_model()->set_seq_len(length);
        longer.mutable_data()->set_batch_tokens(sequences * length);
        return Fits(longer, routing, usable);
      });
  const int64_t units = LargestFitting(
      sequences / unit, kMaxSpecBatchTokens / (unit * seq_len),
      [&](int64_t count) {
        v1::JobSpec larger = spec;
        larger.mutable_data()->set_batch_tokens(count * unit * seq_len);
        return Fits(larger, routing, usable);
      });
  reach.batch_tokens = units * unit * seq_len;
  return reach;
}

std::string Advice(v1::MemoryComponent component, bool schedules_chosen) {
  if (schedules_chosen) {
    // The search has tried every schedule the spec leaves open.
    return "split the model over more devices (parallel.ep or parallel.pp), "
           "or lower model.seq_len or data.batch_tokens";
  }
  switch (component) {
    case v1::MEMORY_COMPONENT_DISPATCH:
      return "chunk the expert dispatch (schedules.dispatch_chunk_tokens, "
             "smaller for a lower peak)";
    case v1::MEMORY_COMPONENT_VOCAB_PROJECTION:
      return "project the vocabulary in blocks (schedules.ring_dtp: true)";
    case v1::MEMORY_COMPONENT_CHECKPOINT:
      return "offload the layer inputs (schedules.sco: true, with "
             "activation_checkpointing)";
    case v1::MEMORY_COMPONENT_OPTIMIZER:
      return "move the optimizer state to the host "
             "(schedules.optimizer_offload: stream) or use optimizer.kind: "
             "skewadam";
    case v1::MEMORY_COMPONENT_WEIGHTS:
    case v1::MEMORY_COMPONENT_GRADIENTS:
      return "split the model over more devices (parallel.ep or parallel.pp)";
    default:
      return "lower model.seq_len or data.batch_tokens, or raise "
             "train.micro_batches";
  }
}

// `precision_advice`: PrecisionAdvice's, for a plan that does not fit.
std::string Explain(const v1::MemoryPlan& plan, const PlanOptions& options,
                    const std::string& precision_advice) {
  const v1::MemoryPrediction& planned = plan.planned();
  const int64_t usable =
      UsableBytes(options.device_memory_bytes, options.margin);
  const v1::MemoryComponent binding = planned.binding_component();
  const int64_t binding_bytes = DeviceBytesAtPeak(*WorstRank(planned), binding);
  const std::string at_peak =
      absl::StrFormat("%s holds the most of it, %s (%.0f%%), during %s",
                      ComponentName(binding), FormatBytes(binding_bytes),
                      100.0 * static_cast<double>(binding_bytes) /
                          static_cast<double>(std::max<int64_t>(
                              1, planned.device_peak_bytes())),
                      planned.peak_phase());
  std::string text;
  if (plan.fits()) {
    text = absl::StrFormat(
        "fits: rank %d's device peak is %s of the %s usable (%s devices less "
        "the %.0f%% margin); %s",
        planned.worst_rank(), FormatBytes(planned.device_peak_bytes()),
        FormatBytes(usable), FormatBytes(options.device_memory_bytes),
        100.0 * options.margin, at_peak);
  } else {
    text = absl::StrFormat(
        "rank %d's device peak would be %s, %s over the %s usable (%s devices "
        "less the %.0f%% margin); %s. To fit: %s",
        planned.worst_rank(), FormatBytes(planned.device_peak_bytes()),
        FormatBytes(planned.device_peak_bytes() - usable), FormatBytes(usable),
        FormatBytes(options.device_memory_bytes), 100.0 * options.margin,
        at_peak, Advice(binding, plan.schedules_chosen()));
    if (!plan.schedules_chosen()) {
      absl::StrAppend(&text, "; or let the planner choose (schedules: auto)");
    }
    if (!precision_advice.empty()) {
      absl::StrAppend(&text, "; or ", precision_advice);
    }
  }
  if (plan.max_seq_len() > 0) {
    // The reach is found to within 1/64 (LargestFitting).
    absl::StrAppend(
        &text, absl::StrFormat(
                   ". The longest model.seq_len that fits is about %d (%s "
                   "without schedules)",
                   plan.max_seq_len(),
                   plan.baseline_max_seq_len() > 0
                       ? absl::StrCat("about ", plan.baseline_max_seq_len())
                       : "none"));
  }
  return text;
}

// MemoryPlan.node_host_bytes of `prediction` for nodes of `devices` ranks.
int64_t NodeHostBytes(const v1::MemoryPrediction& prediction, int devices) {
  int64_t rank_zero = 0, other = 0;
  for (const v1::RankPrediction& rank : prediction.ranks()) {
    if (rank.rank() == 0) {
      rank_zero = rank.host_peak_bytes();
    } else {
      other = std::max(other, rank.host_peak_bytes());
    }
  }
  return rank_zero + std::max(0, devices - 1) * other;
}

// MemoryPlan.node_checkpoint_bytes of `prediction` for nodes of `devices`
// of the job's `world` ranks: each rank writes what it snapshots, and the
// ZeRO shards split the state about equally, so a node writes at most its
// ranks times the largest rank's snapshot (the prediction holds the
// distinct ranks only).
int64_t NodeCheckpointBytes(const v1::MemoryPrediction& prediction, int devices,
                            int world) {
  int64_t most = 0;
  for (const v1::RankPrediction& rank : prediction.ranks()) {
    for (const v1::PredictedPeak& peak : rank.peaks()) {
      if (peak.pool() == v1::MEMORY_POOL_HOST &&
          peak.component() == v1::MEMORY_COMPONENT_SNAPSHOT) {
        most = std::max(most, peak.peak_bytes());
      }
    }
  }
  return most * std::max(1, std::min(devices, world));
}

absl::StatusOr<JobPlan> Plan(const v1::JobSpec& spec,
                             const PlanOptions& options, bool advise_precision);

// The precision levers a spec that does not fit leaves unused, each planned
// as the spec with that change (the schedules searched again under auto):
// computing in bf16 (an fp32 spec), then the product weights' gradients in
// bf16 too, which needs the optimizer offloaded (set to stream where the
// spec has it none or leaves it to auto). The first that fits, with its
// planned peak; "" when none does.
std::string PrecisionAdvice(const v1::JobSpec& spec,
                            const PlanOptions& options) {
  struct Lever {
    v1::JobSpec spec;
    std::string change;
  };
  std::vector<Lever> levers;
  const bool fp32 = spec.precision() == v1::PRECISION_FP32;
  v1::JobSpec bf16 = spec;
  if (fp32) {
    bf16.set_precision(v1::PRECISION_BF16);
    levers.push_back({bf16, "compute in bf16 (precision: bf16)"});
  }
  if (bf16.gradient_accumulation() != v1::GRADIENT_ACCUMULATION_BF16) {
    Lever gradients{bf16, fp32 ? "compute in bf16 with the product weights' "
                                 "gradients in bf16 too (precision: bf16, "
                                 "gradient_accumulation: bf16"
                               : "keep the product weights' gradients in "
                                 "bf16 (gradient_accumulation: bf16"};
    gradients.spec.set_gradient_accumulation(v1::GRADIENT_ACCUMULATION_BF16);
    const v1::OptimizerOffload offload =
        gradients.spec.schedules().optimizer_offload();
    if (offload != v1::OPTIMIZER_OFFLOAD_SERIAL &&
        offload != v1::OPTIMIZER_OFFLOAD_STREAM) {
      gradients.spec.mutable_schedules()->set_optimizer_offload(
          v1::OPTIMIZER_OFFLOAD_STREAM);
      absl::StrAppend(&gradients.change,
                      ", with schedules.optimizer_offload: stream");
    }
    absl::StrAppend(&gradients.change, ")");
    levers.push_back(std::move(gradients));
  }
  PlanOptions without_reach = options;
  without_reach.search_reach = false;
  for (const Lever& lever : levers) {
    if (!ValidateJobSpec(lever.spec).ok()) continue;
    absl::StatusOr<JobPlan> plan =
        Plan(lever.spec, without_reach, /*advise_precision=*/false);
    if (plan.ok() && plan->memory.fits()) {
      return absl::StrCat(
          lever.change, ": the planned device peak is then ",
          FormatBytes(plan->memory.planned().device_peak_bytes()));
    }
  }
  return "";
}

// PlanJob, and with advise_precision the explanation of a plan that does
// not fit names the precision lever that would make it (PrecisionAdvice).
absl::StatusOr<JobPlan> Plan(const v1::JobSpec& spec,
                             const PlanOptions& options,
                             bool advise_precision) {
  if (options.device_memory_bytes <= 0) {
    return absl::InvalidArgumentError("device memory must be positive");
  }
  if (!(options.margin >= 0.0 && options.margin < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("margin ", options.margin, " is outside [0, 1)"));
  }
  absl::StatusOr<v1::JobSpec> placed = OnDevices(spec, options.devices);
  if (!placed.ok()) return placed.status();
  const Routing routing = options.routing_skew.has_value()
                              ? Routing::OfSkew(*options.routing_skew)
                              : Routing::WorstCase();
  const int64_t usable =
      UsableBytes(options.device_memory_bytes, options.margin);

  JobPlan result;
  result.spec = *placed;
  v1::MemoryPlan& plan = result.memory;
  plan.set_device_memory_bytes(options.device_memory_bytes);
  plan.set_routing_skew(options.routing_skew.value_or(0.0));
  plan.set_margin(options.margin);
  plan.set_devices(placed->parallel().ep() * placed->parallel().pp() *
                   placed->parallel().dp());

  v1::JobSpec baseline = *placed;
  SetNoSchedules(&baseline);
  absl::StatusOr<v1::MemoryPrediction> baseline_prediction =
      PredictMemory(baseline, routing);
  if (!baseline_prediction.ok()) return baseline_prediction.status();
  *plan.mutable_baseline() = *std::move(baseline_prediction);

  if (placed->schedules().auto_()) {
    plan.set_schedules_chosen(true);
    // Cheapest first: the first cost at which something fits ends the
    // search (among equal costs, the lowest peak wins). When nothing fits,
    // the lowest peak of all.
    struct Trial {
      v1::JobSpec spec;
      double cost = 0.0;
    };
    std::vector<Trial> trials;
    for (const v1::ScheduleSpec& candidate : Candidates(*placed)) {
      Trial trial{*placed};
      *trial.spec.mutable_schedules() = candidate;
      trial.cost = ThroughputCost(trial.spec);
      trials.push_back(std::move(trial));
    }
    std::stable_sort(
        trials.begin(), trials.end(),
        [](const Trial& a, const Trial& b) { return a.cost < b.cost; });
    std::optional<v1::JobSpec> best;
    std::optional<v1::MemoryPrediction> best_prediction;
    double best_cost = 0.0;
    bool best_fits = false;
    for (const Trial& trial : trials) {
      if (best_fits && trial.cost > best_cost) break;
      // A trial replaces the best when it fits and the best does not, or
      // when it peaks lower: only below this ceiling does its prediction
      // matter.
      int64_t ceiling = std::numeric_limits<int64_t>::max();
      if (best_prediction.has_value()) {
        const int64_t below_best = best_prediction->device_peak_bytes() - 1;
        ceiling = best_fits ? below_best : std::max(usable, below_best);
      }
      absl::StatusOr<std::optional<v1::MemoryPrediction>> prediction =
          PredictMemoryWithin(trial.spec, routing, ceiling);
      if (!prediction.ok()) return prediction.status();
      if (!prediction->has_value()) continue;
      best = trial.spec;
      best_prediction = **std::move(prediction);
      best_cost = trial.cost;
      best_fits = best_prediction->device_peak_bytes() <= usable;
    }
    result.spec = *best;
    *plan.mutable_planned() = *best_prediction;
  } else if (placed->schedules().SerializeAsString() ==
             baseline.schedules().SerializeAsString()) {
    *plan.mutable_planned() = plan.baseline();  // no schedules: one prediction
  } else {
    absl::StatusOr<v1::MemoryPrediction> prediction =
        PredictMemory(*placed, routing);
    if (!prediction.ok()) return prediction.status();
    *plan.mutable_planned() = *std::move(prediction);
  }
  plan.set_fits(plan.planned().device_peak_bytes() <= usable);
  plan.set_precision(result.spec.precision() == v1::PRECISION_FP32 ? "fp32"
                                                                   : "bf16");
  const engine::ModelConfig config = engine::ModelConfigFromSpec(result.spec);
  plan.set_bf16_weight_storage(config.bf16_weight_storage);
  plan.set_bf16_gradients(config.bf16_gradients);
  plan.set_node_host_bytes(NodeHostBytes(
      plan.planned(), result.spec.resources().devices_per_node()));
  plan.set_node_checkpoint_bytes(NodeCheckpointBytes(
      plan.planned(), result.spec.resources().devices_per_node(),
      result.spec.parallel().ep() * result.spec.parallel().pp() *
          result.spec.parallel().dp()));
  plan.set_checkpoint_write_bytes_per_second(
      options.checkpoint_write_bytes_per_second);
  plan.set_stop_grace_seconds(options.stop_grace_seconds);
  plan.set_node_checkpoint_write_seconds(
      static_cast<double>(plan.node_checkpoint_bytes()) /
      options.checkpoint_write_bytes_per_second);
  plan.set_stop_checkpoint_write_seconds(
      (result.spec.train().checkpoint_write() == v1::CHECKPOINT_WRITE_BLOCKING
           ? 1
           : 2) *
      plan.node_checkpoint_write_seconds());

  if (options.search_reach) {
    const Reach planned_reach = ReachOf(result.spec, routing, usable);
    const Reach baseline_reach = ReachOf(baseline, routing, usable);
    plan.set_max_seq_len(planned_reach.seq_len);
    plan.set_max_batch_tokens(planned_reach.batch_tokens);
    plan.set_baseline_max_seq_len(baseline_reach.seq_len);
    plan.set_baseline_max_batch_tokens(baseline_reach.batch_tokens);
  }
  const std::string precision_advice =
      advise_precision && !plan.fits() ? PrecisionAdvice(spec, options) : "";
  plan.set_explanation(Explain(plan, options, precision_advice));
  return result;
}

}  // namespace

absl::StatusOr<JobPlan> PlanJob(const v1::JobSpec& spec,
                                const PlanOptions& options) {
  if (options.devices > 0 || !IsElastic(spec.resources())) {
    return Plan(spec, options, /*advise_precision=*/true);
  }
  const int32_t min_nodes = spec.resources().min_nodes();
  // Elastic: at min_nodes dp is the smallest, so each rank holds the most.
  // Every attempt runs the same schedules, chosen there.
  absl::StatusOr<v1::JobSpec> smallest = SpecForNodes(spec, min_nodes);
  if (!smallest.ok()) return smallest.status();
  // The reach, too, is what fits there.
  absl::StatusOr<JobPlan> smallest_plan =
      Plan(*smallest, options, /*advise_precision=*/true);
  if (!smallest_plan.ok()) return smallest_plan.status();
  v1::JobSpec most = spec;
  *most.mutable_schedules() = smallest_plan->spec.schedules();
  most.mutable_resources()->clear_min_nodes();
  PlanOptions most_options = options;
  most_options.search_reach = false;
  absl::StatusOr<JobPlan> result =
      Plan(most, most_options, /*advise_precision=*/true);
  if (!result.ok()) return result.status();
  result->spec.mutable_resources()->set_min_nodes(min_nodes);
  v1::MemoryPlan& plan = result->memory;
  const v1::MemoryPlan& at_min = smallest_plan->memory;
  plan.set_min_nodes(min_nodes);
  plan.set_min_nodes_device_peak_bytes(at_min.planned().device_peak_bytes());
  plan.set_min_nodes_node_host_bytes(at_min.node_host_bytes());
  plan.set_max_seq_len(at_min.max_seq_len());
  plan.set_max_batch_tokens(at_min.max_batch_tokens());
  plan.set_baseline_max_seq_len(at_min.baseline_max_seq_len());
  plan.set_baseline_max_batch_tokens(at_min.baseline_max_batch_tokens());
  plan.set_schedules_chosen(at_min.schedules_chosen());
  // A rank's shards, and so a node's checkpoint, are largest there too.
  if (at_min.node_checkpoint_bytes() > plan.node_checkpoint_bytes()) {
    plan.set_node_checkpoint_bytes(at_min.node_checkpoint_bytes());
    plan.set_node_checkpoint_write_seconds(
        at_min.node_checkpoint_write_seconds());
    plan.set_stop_checkpoint_write_seconds(
        at_min.stop_checkpoint_write_seconds());
  }
  const std::string where =
      absl::StrCat("at resources.min_nodes ", min_nodes, " (parallel.dp ",
                   smallest->parallel().dp(), ")");
  if (!plan.fits()) {
    // Said again now that it knows the schedules were chosen.
    plan.set_explanation(
        Explain(plan, options, PrecisionAdvice(most, options)));
  } else if (!at_min.fits()) {
    plan.set_fits(false);
    plan.set_explanation(absl::StrCat(where, ": ", at_min.explanation(),
                                      "; or raise resources.min_nodes"));
  } else if (plan.fits()) {
    absl::StrAppend(plan.mutable_explanation(), "; ", where, ", rank ",
                    at_min.planned().worst_rank(), "'s device peak is ",
                    FormatBytes(at_min.planned().device_peak_bytes()));
  }
  return result;
}

int64_t UsableBytes(int64_t device_memory_bytes, double margin) {
  return static_cast<int64_t>(
      std::floor(static_cast<double>(device_memory_bytes) * (1.0 - margin)));
}

int64_t NodeDeviceMemoryBytes(const v1::Node& node) {
  int64_t smallest = 0;
  for (const v1::Device& device : node.devices()) {
    if (device.memory_bytes() <= 0) continue;
    smallest = smallest == 0 ? device.memory_bytes()
                             : std::min(smallest, device.memory_bytes());
  }
  return smallest;
}

}  // namespace plateau::plan
