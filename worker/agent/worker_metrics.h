// The node's Prometheus metrics (docs/ARCHITECTURE.md section 6), set from the
// status files of the ranks it runs. Per rank: memory current and peak bytes by
// pool and component, the device pool's own current and peak bytes, and its
// capacity. Per job, only on the node that runs rank 0 (so that a sum over
// nodes counts each once): tokens (a counter), tokens per second, loss, the
// latest validation loss, step, each expert's tokens (a
// counter) and each layer's load imbalance (max/mean of the token copies
// the experts received since the previous update). Optimizer state by tier
// is the sum over this node's ranks: summed over nodes it is the job's.
// Thread-safe.
#ifndef PLATEAU_WORKER_AGENT_WORKER_METRICS_H_
#define PLATEAU_WORKER_AGENT_WORKER_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "proto/worker.pb.h"

namespace plateau::worker {

class WorkerMetrics {
 public:
  WorkerMetrics();

  // Sets the job's series from its local ranks' newest statuses.
  void Update(const std::string& job_id,
              const std::vector<v1::RankStatus>& ranks);
  // Drops every series of the job.
  void Remove(const std::string& job_id);

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

 private:
  // What was exported for one job: how to remove it, and what the next
  // update needs to turn totals into increments and load into imbalance.
  struct JobSeries {
    std::vector<std::function<void()>> removers;
    std::map<std::pair<int, int>, int64_t> expert_tokens;  // (layer, expert)
  };

  template <typename Metric>
  Metric& Series(JobSeries& series, prometheus::Family<Metric>& family,
                 const prometheus::Labels& labels);
  // Moves the counter to `total`; one that would go down (a run resumed
  // from an earlier checkpoint) is reset, as a restarted process would be.
  void SetCounter(JobSeries& series,
                  prometheus::Family<prometheus::Counter>& family,
                  const prometheus::Labels& labels, double total);
  void UpdateJobLevel(const std::string& job_id, const v1::RankStatus& rank0,
                      JobSeries& series) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& memory_peak_;
  prometheus::Family<prometheus::Gauge>& memory_current_;
  prometheus::Family<prometheus::Gauge>& device_capacity_;
  prometheus::Family<prometheus::Gauge>& device_peak_;
  prometheus::Family<prometheus::Gauge>& device_current_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Gauge>& tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& validation_loss_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Counter>& expert_tokens_;
  prometheus::Family<prometheus::Gauge>& expert_imbalance_;
  prometheus::Family<prometheus::Gauge>& optimizer_state_;
  prometheus::Family<prometheus::Gauge>& checkpoint_stall_;
  prometheus::Family<prometheus::Gauge>& checkpoint_write_seconds_;
  prometheus::Family<prometheus::Gauge>& checkpoint_bytes_written_;
  absl::Mutex mutex_;
  std::map<std::string, JobSeries> jobs_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_WORKER_METRICS_H_
