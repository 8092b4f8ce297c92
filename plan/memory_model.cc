#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/expert_spill_plan.h"
#include "engine/model/model_config.h"
#include "plan/memory_ledger.h"
#include "plan/rank_replay.h"
#include "proto/job_spec.h"

namespace plateau::plan {
namespace {

absl::StatusOr<std::vector<std::vector<double>>> ExpertLoadOf(
    const Routing& routing, int64_t layers, int64_t experts, int64_t top_k) {
  if (!routing.layer_expert_load.empty()) {
    if (static_cast<int64_t>(routing.layer_expert_load.size()) != layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "routing: expert loads for ", routing.layer_expert_load.size(),
          " layers, the model has ", layers));
    }
    for (const std::vector<double>& load : routing.layer_expert_load) {
      if (static_cast<int64_t>(load.size()) != experts) {
        return absl::InvalidArgumentError(absl::StrCat("routing: ", load.size(),
                                                       " expert loads for ",
                                                       experts, " experts"));
      }
      double total = 0.0;
      for (double share : load) {
        if (!(share >= 0.0)) {
          return absl::InvalidArgumentError("routing: a negative expert load");
        }
        total += share;
      }
      if (std::abs(total - 1.0) > 1e-6) {
        return absl::InvalidArgumentError(
            absl::StrCat("routing: expert loads sum to ", total, ", not 1"));
      }
    }
    return routing.layer_expert_load;
  }
  if (routing.worst_case) {
    std::vector<double> load(experts, 0.0);
    std::fill(load.end() - top_k, load.end(), 1.0 / static_cast<double>(top_k));
    return std::vector<std::vector<double>>{load};
  }
  const double e = static_cast<double>(experts);
  if (!(routing.skew >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing skew ", routing.skew,
                     " is below 1 (the busiest expert over the mean)"));
  }
  // The busiest expert can take at most one copy of each token.
  const double skew = std::min(routing.skew, e / static_cast<double>(top_k));
  std::vector<double> load(experts,
                           experts > 1 ? (1.0 - skew / e) / (e - 1.0) : 1.0);
  load[0] = skew / e;
  return std::vector<std::vector<double>>{load};
}

// PipelinedLLEP's chunks hold at most the cap from each source, but how
// full they are, and how many experts a rank lends or borrows (with their
// weights and gradients) for the LLEP spill (engine/model/
// expert_spill_plan.h), depend on the routing, and no one routing is the
// worst for all of it. Beside the collapse, the extremes replayed, over
// ranks of `local` experts each (a share per expert, none above 1 / top_k):
// - even: every pair of ranks exchanges copies, every chunk full;
// - every copy over the last rank's experts alike: the most experts one
//   rank lends (the spill lends whole experts, the most loaded first);
// - the last rank, or the last half, idle and the rest even: ranks that
//   borrow while their chunks fill with borrowed copies;
// - the first ranks just past the spill's threshold, the last idle, the
//   rest even: the idle rank borrows an expert from each busy one, about a
//   quarter of the mean at a time, so the most experts one rank borrows;
// - the last rank at the threshold, the rest even: the most copies a rank
//   receives without lending any.
// memory_model_test holds them to 1000 random routings per layout.
std::vector<std::vector<double>> PipelinedLlepLoads(const ReplayJob& job) {
  const int64_t experts = job.config.experts;
  const int64_t top_k = job.config.top_k;
  const int64_t local = experts / job.ep;
  const double cap = 1.0 / static_cast<double>(top_k);
  std::vector<std::vector<double>> loads;
  loads.emplace_back(experts, 1.0 / static_cast<double>(experts));
  if (local > top_k) {
    std::vector<double>& spread = loads.emplace_back(experts, 0.0);
    std::fill(spread.end() - local, spread.end(),
              1.0 / static_cast<double>(local));
  }
  std::vector<int64_t> idle_ranks = {1};
  if (job.ep / 2 > 1) idle_ranks.push_back(job.ep / 2);
  for (const int64_t idle : idle_ranks) {
    const int64_t used = experts - idle * local;
    if (used < top_k) continue;
    std::vector<double>& borrowers =
        loads.emplace_back(experts, 1.0 / static_cast<double>(used));
    std::fill(borrowers.end() - idle * local, borrowers.end(), 0.0);
  }
  // Each busy rank, a twentieth of the mean past the threshold, lends the
  // idle one an expert's copies, 0.3 of the mean, until it is full: up to
  // four lenders (ep - 2 with fewer ranks).
  const int64_t busy = std::min<int64_t>(
      job.ep - 2, std::ceil(1.0 / (engine::kSpillFactor - 1.0)));
  const double busy_share = (engine::kSpillFactor + 0.05) / job.ep;
  const double rest_share = 1.0 - busy_share * static_cast<double>(busy);
  const int64_t rest_experts = (job.ep - 1 - busy) * local;
  if (busy > 0 && busy_share / local <= cap &&
      rest_share / rest_experts <= cap) {
    std::vector<double>& lenders = loads.emplace_back(experts, 0.0);
    for (int64_t e = 0; e < experts - local; ++e) {
      lenders[e] =
          e / local < busy ? busy_share / local : rest_share / rest_experts;
    }
  }
  const double kept = std::min(
      {engine::kSpillFactor / job.ep, 1.0, cap * static_cast<double>(local)});
  if ((1.0 - kept) / (experts - local) <= cap) {
    std::vector<double>& threshold = loads.emplace_back(
        experts, (1.0 - kept) / static_cast<double>(experts - local));
    std::fill(threshold.end() - local, threshold.end(),
              kept / static_cast<double>(local));
  }
  return loads;
}

// `job` under WorstCase's collapse moved from the last expert rank's last
// top_k experts to `expert_rank`'s (and those before it, cyclically, when
// top_k is more than a rank's experts).
ReplayJob CollapsedOnto(const ReplayJob& job, int expert_rank) {
  ReplayJob onto = job;
  const int64_t shift = static_cast<int64_t>(job.ep - 1 - expert_rank) *
                        (job.config.experts / job.ep);
  std::vector<double>& load = onto.layer_expert_load.front();
  std::rotate(load.begin(), load.begin() + shift, load.end());
  return onto;
}

// What `ledger` kept of a replay of `index`.
v1::RankPrediction RankPredictionOf(const MemoryLedger& ledger,
                                    const RankIndex& index,
                                    const ReplayJob& job) {
  v1::RankPrediction rank;
  rank.set_rank(index.rank(job));
  rank.set_pp_index(index.pp);
  rank.set_ep_index(index.ep);
  rank.set_dp_index(index.dp);
  for (v1::MemoryPool pool : {v1::MEMORY_POOL_DEVICE, v1::MEMORY_POOL_HOST}) {
    for (int c = 1; c <= kComponents; ++c) {
      const auto component = static_cast<v1::MemoryComponent>(c);
      v1::PredictedPeak& peak = *rank.add_peaks();
      peak.set_pool(pool);
      peak.set_component(component);
      peak.set_peak_bytes(ledger.peak_bytes(pool, component));
      if (pool != v1::MEMORY_POOL_DEVICE) continue;
      v1::PredictedPeak& at_peak = *rank.add_device_at_peak();
      at_peak.set_pool(pool);
      at_peak.set_component(component);
      at_peak.set_peak_bytes(ledger.device_bytes_at_peak(component));
    }
  }
  rank.set_device_peak_bytes(ledger.pool_peak_bytes(v1::MEMORY_POOL_DEVICE));
  rank.set_host_peak_bytes(ledger.pool_peak_bytes(v1::MEMORY_POOL_HOST));
  rank.set_device_peak_phase(ledger.device_peak_phase());
  return rank;
}

// PredictMemory, or nullopt as soon as one replay peaks above
// `ceiling_bytes` on its device.
absl::StatusOr<std::optional<v1::MemoryPrediction>> Predict(
    const v1::JobSpec& spec, const Routing& routing, int64_t validation_windows,
    int64_t ceiling_bytes) {
  absl::StatusOr<ReplayJob> replay_job =
      ReplayJobOf(spec, routing, validation_windows);
  if (!replay_job.ok()) return replay_job.status();
  const ReplayJob& job = *replay_job;
  // The routings to replay. Under the worst routing, jobs[0] is the
  // collapse, which each rank replays onto its own experts (CollapsedOnto):
  // with one expert rank every copy reaches it whatever the routing, and
  // the whole dispatch's rank receives the most under its own collapse.
  // With PipelinedLLEP over expert ranks, jobs[1] keeps the collapse on the
  // last rank's experts, for the other ranks, which borrow them for the
  // spill while they send it every copy; PipelinedLlepLoads' extremes
  // follow.
  const bool collapses =
      routing.worst_case && routing.layer_expert_load.empty();
  const bool pipelined =
      collapses && job.ep > 1 && job.config.dispatch_chunk_tokens > 0;
  std::vector<ReplayJob> jobs = {job};
  if (pipelined) {
    jobs.push_back(job);
    for (std::vector<double>& load : PipelinedLlepLoads(job)) {
      jobs.push_back(job);
      jobs.back().layer_expert_load = {std::move(load)};
    }
  }

  // For each rank, the routing that gives it the highest device peak (its
  // host buffers, the layer boundaries, offload and checkpoint, do not
  // depend on the routing). Every rank replays the first routing before
  // any replays the others, so that a spec far past the ceiling stops
  // within the first few replays, not after every routing of one rank.
  const std::vector<RankIndex> ranks = DistinctRanks(job);
  std::vector<v1::RankPrediction> chosen(ranks.size());
  MemoryLedger ledger;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      // jobs[1] on the last rank is its own collapse, replayed as jobs[0].
      if (pipelined && j == 1 && ranks[r].ep == job.ep - 1) continue;
      ledger.Reset();
      if (j == 0 && collapses) {
        ReplayRank(CollapsedOnto(job, ranks[r].ep), ranks[r], &ledger);
      } else {
        ReplayRank(jobs[j], ranks[r], &ledger);
      }
      if (!ledger.status().ok()) return ledger.status();
      const int64_t peak_bytes = ledger.pool_peak_bytes(v1::MEMORY_POOL_DEVICE);
      if (peak_bytes > ceiling_bytes) return std::nullopt;
      if (j == 0 || peak_bytes > chosen[r].device_peak_bytes()) {
        chosen[r] = RankPredictionOf(ledger, ranks[r], job);
      }
    }
  }

  v1::MemoryPrediction prediction;
  prediction.set_schedules(DescribeSchedules(spec.schedules()));
  for (v1::RankPrediction& rank : chosen) {
    *prediction.add_ranks() = std::move(rank);
  }
  const v1::RankPrediction* worst = nullptr;
  for (const v1::RankPrediction& rank : prediction.ranks()) {
    if (worst == nullptr ||
        rank.device_peak_bytes() > worst->device_peak_bytes()) {
      worst = &rank;
    }
    prediction.set_host_peak_bytes(
        std::max(prediction.host_peak_bytes(), rank.host_peak_bytes()));
  }
  prediction.set_worst_rank(worst->rank());
  prediction.set_device_peak_bytes(worst->device_peak_bytes());
  prediction.set_peak_phase(worst->device_peak_phase());
  const v1::PredictedPeak* binding = nullptr;
  for (const v1::PredictedPeak& peak : worst->device_at_peak()) {
    if (binding == nullptr || peak.peak_bytes() > binding->peak_bytes()) {
      binding = &peak;
    }
  }
  prediction.set_binding_component(binding->component());
  return prediction;
}

}  // namespace

const v1::RankPrediction* WorstRank(const v1::MemoryPrediction& prediction) {
  for (const v1::RankPrediction& rank : prediction.ranks()) {
    if (rank.rank() == prediction.worst_rank()) return &rank;
  }
  return nullptr;
}

int64_t DeviceBytesAtPeak(const v1::RankPrediction& rank,
                          v1::MemoryComponent component) {
  for (const v1::PredictedPeak& peak : rank.device_at_peak()) {
    if (peak.component() == component) return peak.peak_bytes();
  }
  return 0;
}

std::string DescribeSchedules(const v1::ScheduleSpec& schedules) {
  std::vector<std::string> parts;
  if (schedules.dispatch_chunk_tokens() > 0) {
    parts.push_back(absl::StrCat("dispatch_chunk_tokens ",
                                 schedules.dispatch_chunk_tokens()));
  }
  if (schedules.ring_dtp()) parts.push_back("ring_dtp");
  if (schedules.sco()) parts.push_back("sco");
  if (schedules.optimizer_offload() != v1::OPTIMIZER_OFFLOAD_NONE &&
      schedules.optimizer_offload() != v1::OPTIMIZER_OFFLOAD_UNSPECIFIED) {
    parts.push_back(absl::StrCat(
        "optimizer_offload ", SpecEnumName(*v1::OptimizerOffload_descriptor(),
                                           schedules.optimizer_offload())));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

absl::StatusOr<ReplayJob> ReplayJobOf(const v1::JobSpec& spec,
                                      const Routing& routing,
                                      int64_t validation_windows) {
  ReplayJob job;
  job.config = engine::ModelConfigFromSpec(spec);
  job.ep = spec.parallel().ep();
  job.pp = spec.parallel().pp();
  job.dp = spec.parallel().dp();
  job.micro_batches = MicroBatchesOf(spec.train());
  const int64_t sequences = spec.data().batch_tokens() / job.config.seq_len;
  const int64_t split = job.micro_batches * job.ep * job.dp;
  if (sequences < split || sequences % split != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.batch_tokens: ", sequences, " sequences of ", job.config.seq_len,
        " tokens do not split into ", job.micro_batches, " micro-batches over ",
        job.ep * job.dp, " ranks (parallel.ep x parallel.dp)"));
  }
  job.rank_sequences = sequences / split;
  job.optimizer = spec.optimizer().kind();
  job.expert_momentum = spec.optimizer().expert_momentum();
  job.evaluates = spec.train().eval_every() > 0;
  job.background_checkpoints =
      spec.train().checkpoint_write() != v1::CHECKPOINT_WRITE_BLOCKING;
  job.validation_windows = validation_windows;
  job.optimizer_offload = spec.schedules().optimizer_offload();
  if (job.optimizer_offload == v1::OPTIMIZER_OFFLOAD_UNSPECIFIED) {
    job.optimizer_offload = v1::OPTIMIZER_OFFLOAD_NONE;
  }
  absl::StatusOr<std::vector<std::vector<double>>> load = ExpertLoadOf(
      routing, job.config.layers, job.config.experts, job.config.top_k);
  if (!load.ok()) return load.status();
  job.layer_expert_load = *std::move(load);
  return job;
}

absl::StatusOr<v1::MemoryPrediction> PredictMemory(const v1::JobSpec& spec,
                                                   const Routing& routing,
                                                   int64_t validation_windows) {
  absl::StatusOr<std::optional<v1::MemoryPrediction>> prediction = Predict(
      spec, routing, validation_windows, std::numeric_limits<int64_t>::max());
  if (!prediction.ok()) return prediction.status();
  return **std::move(prediction);
}

absl::StatusOr<std::optional<v1::MemoryPrediction>> PredictMemoryWithin(
    const v1::JobSpec& spec, const Routing& routing, int64_t ceiling_bytes) {
  return Predict(spec, routing, /*validation_windows=*/0, ceiling_bytes);
}

}  // namespace plateau::plan
