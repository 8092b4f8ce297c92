#include "worker/agent/worker_metrics.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace plateau::worker {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;

std::string PoolLabel(v1::MemoryPool pool) {
  return absl::AsciiStrToLower(
      absl::StripPrefix(v1::MemoryPool_Name(pool), "MEMORY_POOL_"));
}

std::string ComponentLabel(v1::MemoryComponent component) {
  return absl::AsciiStrToLower(absl::StripPrefix(
      v1::MemoryComponent_Name(component), "MEMORY_COMPONENT_"));
}

}  // namespace

WorkerMetrics::WorkerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      memory_peak_(BuildGauge()
                       .Name("plateau_memory_peak_bytes")
                       .Help("Peak bytes a rank held, by pool and component")
                       .Register(*registry_)),
      memory_current_(BuildGauge()
                          .Name("plateau_memory_current_bytes")
                          .Help("Bytes a rank holds now, by pool and component")
                          .Register(*registry_)),
      device_capacity_(BuildGauge()
                           .Name("plateau_device_memory_capacity_bytes")
                           .Help("A rank's device memory capacity")
                           .Register(*registry_)),
      device_peak_(BuildGauge()
                       .Name("plateau_device_memory_peak_bytes")
                       .Help("Peak bytes of a rank's device pool as a whole")
                       .Register(*registry_)),
      device_current_(BuildGauge()
                          .Name("plateau_device_memory_current_bytes")
                          .Help("Bytes a rank's device pool holds now")
                          .Register(*registry_)),
      tokens_(BuildCounter()
                  .Name("plateau_train_tokens_total")
                  .Help("Training tokens processed by the job")
                  .Register(*registry_)),
      tokens_per_second_(BuildGauge()
                             .Name("plateau_train_tokens_per_second")
                             .Help("Training tokens per second, recent steps")
                             .Register(*registry_)),
      loss_(BuildGauge()
                .Name("plateau_train_loss")
                .Help("Training loss of the latest step")
                .Register(*registry_)),
      validation_loss_(BuildGauge()
                           .Name("plateau_train_validation_loss")
                           .Help("Validation cross-entropy of the latest "
                                 "evaluation")
                           .Register(*registry_)),
      step_(BuildGauge()
                .Name("plateau_train_step")
                .Help("Steps completed")
                .Register(*registry_)),
      expert_tokens_(BuildCounter()
                         .Name("plateau_expert_tokens_total")
                         .Help("Token copies routed to each expert")
                         .Register(*registry_)),
      expert_imbalance_(
          BuildGauge()
              .Name("plateau_expert_load_imbalance_ratio")
              .Help("Max over mean of the experts' load, recent steps")
              .Register(*registry_)),
      optimizer_state_(BuildGauge()
                           .Name("plateau_optimizer_state_bytes")
                           .Help("Optimizer state by tier, this node's ranks")
                           .Register(*registry_)),
      checkpoint_stall_(BuildGauge()
                            .Name("plateau_checkpoint_stall_seconds")
                            .Help("How long training stood still for the "
                                  "latest checkpoint")
                            .Register(*registry_)),
      checkpoint_write_seconds_(
          BuildGauge()
              .Name("plateau_checkpoint_write_seconds")
              .Help("How long the slowest rank took to write its shards of "
                    "the latest checkpoint")
              .Register(*registry_)),
      checkpoint_bytes_written_(
          BuildGauge()
              .Name("plateau_checkpoint_bytes_written")
              .Help("Bytes a rank wrote for the latest checkpoint (its "
                    "shards)")
              .Register(*registry_)) {}

template <typename Metric>
Metric& WorkerMetrics::Series(JobSeries& series,
                              prometheus::Family<Metric>& family,
                              const prometheus::Labels& labels) {
  const bool exists = family.Has(labels);
  Metric& metric = family.Add(labels);
  if (!exists) {
    series.removers.push_back([&family, &metric] { family.Remove(&metric); });
  }
  return metric;
}

void WorkerMetrics::SetCounter(JobSeries& series,
                               prometheus::Family<prometheus::Counter>& family,
                               const prometheus::Labels& labels, double total) {
  prometheus::Counter* counter = &Series(series, family, labels);
  if (total < counter->Value()) {
    // Its remover stays valid: Remove ignores a metric it no longer has,
    // and the new one gets a remover of its own.
    family.Remove(counter);
    counter = &Series(series, family, labels);
  }
  counter->Increment(total - counter->Value());
}

void WorkerMetrics::Update(const std::string& job_id,
                           const std::vector<v1::RankStatus>& ranks) {
  absl::MutexLock lock(&mutex_);
  JobSeries& series = jobs_[job_id];
  std::map<std::string, double> optimizer_state;
  for (const v1::RankStatus& rank : ranks) {
    const std::string rank_label = absl::StrCat(rank.rank());
    for (const v1::MemoryUsage& usage : rank.memory().usage()) {
      const prometheus::Labels labels = {
          {"job", job_id},
          {"rank", rank_label},
          {"pool", PoolLabel(usage.pool())},
          {"component", ComponentLabel(usage.component())}};
      Series(series, memory_peak_, labels)
          .Set(static_cast<double>(usage.peak_bytes()));
      Series(series, memory_current_, labels)
          .Set(static_cast<double>(usage.current_bytes()));
    }
    const prometheus::Labels rank_labels = {{"job", job_id},
                                            {"rank", rank_label}};
    Series(series, device_capacity_, rank_labels)
        .Set(static_cast<double>(rank.memory().device_capacity_bytes()));
    Series(series, device_peak_, rank_labels)
        .Set(static_cast<double>(rank.memory().device_peak_bytes()));
    Series(series, device_current_, rank_labels)
        .Set(static_cast<double>(rank.memory().device_current_bytes()));
    if (rank.progress().checkpoint_bytes_written() > 0) {
      Series(series, checkpoint_bytes_written_, rank_labels)
          .Set(static_cast<double>(rank.progress().checkpoint_bytes_written()));
    }
    for (const auto& [tier, bytes] : rank.optimizer_state_bytes()) {
      optimizer_state[tier] += static_cast<double>(bytes);
    }
    if (rank.rank() == 0) UpdateJobLevel(job_id, rank, series);
  }
  for (const auto& [tier, bytes] : optimizer_state) {
    Series(series, optimizer_state_, {{"job", job_id}, {"tier", tier}})
        .Set(bytes);
  }
}

void WorkerMetrics::UpdateJobLevel(const std::string& job_id,
                                   const v1::RankStatus& rank0,
                                   JobSeries& series) {
  const prometheus::Labels job = {{"job", job_id}};
  const v1::JobProgress& progress = rank0.progress();
  SetCounter(series, tokens_, job,
             static_cast<double>(progress.tokens_total()));
  Series(series, tokens_per_second_, job).Set(progress.tokens_per_second());
  Series(series, step_, job).Set(static_cast<double>(progress.step()));
  if (progress.checkpoint_bytes_written() > 0) {
    Series(series, checkpoint_stall_, job)
        .Set(progress.checkpoint_stall_seconds());
    Series(series, checkpoint_write_seconds_, job)
        .Set(progress.checkpoint_write_seconds());
  }
  if (progress.step() > 0) Series(series, loss_, job).Set(progress.loss());
  if (progress.validation_loss() > 0) {
    Series(series, validation_loss_, job).Set(progress.validation_loss());
  }
  for (const v1::ExpertLoad& layer : rank0.expert_tokens()) {
    const std::string layer_label = absl::StrCat(layer.layer());
    // Load since the previous update; all of it the first time.
    int64_t largest = 0;
    int64_t sum = 0;
    for (int expert = 0; expert < layer.tokens_size(); ++expert) {
      const int64_t total = layer.tokens(expert);
      int64_t& previous = series.expert_tokens[{layer.layer(), expert}];
      const int64_t recent = total >= previous ? total - previous : total;
      previous = total;
      largest = std::max(largest, recent);
      sum += recent;
      SetCounter(series, expert_tokens_,
                 {{"job", job_id},
                  {"layer", layer_label},
                  {"expert", absl::StrCat(expert)}},
                 static_cast<double>(total));
    }
    if (sum > 0) {
      Series(series, expert_imbalance_,
             {{"job", job_id}, {"layer", layer_label}})
          .Set(static_cast<double>(largest) * layer.tokens_size() /
               static_cast<double>(sum));
    }
  }
}

void WorkerMetrics::Remove(const std::string& job_id) {
  absl::MutexLock lock(&mutex_);
  auto found = jobs_.find(job_id);
  if (found == jobs_.end()) return;
  for (const std::function<void()>& remove : found->second.removers) remove();
  jobs_.erase(found);
}

}  // namespace plateau::worker
