// The daemon's Prometheus metrics (docs/ARCHITECTURE.md section 6): jobs and
// nodes by state, devices by state, submissions, restarts, preemptions,
// queue wait and scheduling latency histograms, and gRPC requests by method
// and code with latency. Served on --metrics_listen by MetricsServer
// (common/metrics_server.h).
#ifndef PLATEAU_DAEMON_METRICS_DAEMON_METRICS_H_
#define PLATEAU_DAEMON_METRICS_DAEMON_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "proto/job.pb.h"
#include "proto/node.pb.h"

namespace plateau::daemon {

class DaemonMetrics {
 public:
  DaemonMetrics();

  void JobSubmitted();
  void JobRestarted();
  void JobPreempted();
  void QueueWait(double seconds);
  void SchedulingPass(double seconds);
  // Every state gets a sample, zero included, so dashboards see them all.
  void SetJobCounts(const std::map<v1::JobState, int64_t>& counts);
  void SetNodeCounts(const std::map<v1::NodeState, int64_t>& counts);
  // Devices "allocated", "free" (on READY nodes) and "unavailable"
  // (draining or lost nodes).
  void SetDeviceCounts(int64_t allocated, int64_t free, int64_t unavailable);
  // A job that holds devices (scheduled or running): its restarts so far.
  struct RunningJobSample {
    std::string job_id;
    std::string owner;
    int restarts = 0;
  };
  // plateau_job_restarts{job,owner} for exactly these jobs (others' series
  // are removed) and plateau_user_devices{user}: devices held per user (a
  // user who held some before and holds none now reads 0).
  void SetRunningJobs(const std::vector<RunningJobSample>& jobs,
                      const std::map<std::string, int64_t>& devices_by_user);
  // plateau_node_drained{node,reason} 1 for exactly these drained nodes
  // (node -> the reason given, "" for none); others' series are removed.
  void SetDrainedNodes(const std::map<std::string, std::string>& reasons);
  // plateau_queue_oldest_wait_seconds: how long the job queued longest has
  // waited since it was (re)queued; 0 with an empty queue.
  void SetQueueOldestWait(double seconds);
  // gRPC code name, e.g. "OK", "INVALID_ARGUMENT".
  void RpcFinished(const std::string& method, const std::string& code,
                   double seconds);

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Counter& jobs_submitted_;
  prometheus::Counter& job_restarts_;
  prometheus::Counter& jobs_preempted_;
  prometheus::Histogram& queue_wait_;
  prometheus::Histogram& scheduling_latency_;
  prometheus::Family<prometheus::Gauge>& nodes_;
  prometheus::Family<prometheus::Gauge>& devices_;
  prometheus::Family<prometheus::Gauge>& running_job_restarts_;
  prometheus::Family<prometheus::Gauge>& user_devices_;
  prometheus::Family<prometheus::Gauge>& drained_nodes_;
  prometheus::Gauge& queue_oldest_wait_;
  absl::Mutex running_mutex_;
  std::map<std::string, prometheus::Gauge*> restarts_by_job_
      ABSL_GUARDED_BY(running_mutex_);
  std::map<std::string, prometheus::Gauge*> devices_by_user_
      ABSL_GUARDED_BY(running_mutex_);
  absl::Mutex drained_mutex_;
  std::vector<prometheus::Gauge*> drained_series_
      ABSL_GUARDED_BY(drained_mutex_);
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Histogram>& rpc_latency_;
  absl::Mutex rpc_mutex_;  // Family::Add is thread-safe; this keeps the map
  std::map<std::string, prometheus::Histogram*> rpc_latency_by_method_
      ABSL_GUARDED_BY(rpc_mutex_);
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_METRICS_DAEMON_METRICS_H_
