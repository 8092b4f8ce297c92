#include "daemon/metrics/daemon_metrics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace plateau::daemon {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// "JOB_STATE_RUNNING" -> "running".
std::string StateLabel(const std::string& enum_name, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(enum_name, prefix));
}

const Histogram::BucketBoundaries& QueueWaitBuckets() {
  static const auto* buckets = new Histogram::BucketBoundaries{
      0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600};
  return *buckets;
}

const Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
      0.01,   0.025,   0.05,   0.1,   0.25,   1};
  return *buckets;
}

}  // namespace

DaemonMetrics::DaemonMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_(BuildGauge()
                .Name("plateau_jobs")
                .Help("Jobs by state")
                .Register(*registry_)),
      jobs_submitted_(BuildCounter()
                          .Name("plateau_jobs_submitted_total")
                          .Help("Jobs accepted by SubmitJob")
                          .Register(*registry_)
                          .Add({})),
      job_restarts_(BuildCounter()
                        .Name("plateau_job_restarts_total")
                        .Help("Attempts that failed and were requeued")
                        .Register(*registry_)
                        .Add({})),
      jobs_preempted_(BuildCounter()
                          .Name("plateau_jobs_preempted_total")
                          .Help("Attempts stopped to make room (for a job of "
                                "higher priority, or by a drain with "
                                "--preempt), each requeued without using a "
                                "restart")
                          .Register(*registry_)
                          .Add({})),
      queue_wait_(BuildHistogram()
                      .Name("plateau_job_queue_wait_seconds")
                      .Help("Time from queued to scheduled, per attempt")
                      .Register(*registry_)
                      .Add({}, QueueWaitBuckets())),
      scheduling_latency_(BuildHistogram()
                              .Name("plateau_schedule_latency_seconds")
                              .Help("Duration of a scheduling pass")
                              .Register(*registry_)
                              .Add({}, LatencyBuckets())),
      nodes_(BuildGauge()
                 .Name("plateau_nodes")
                 .Help("Nodes by state")
                 .Register(*registry_)),
      devices_(BuildGauge()
                   .Name("plateau_devices")
                   .Help("Devices by state")
                   .Register(*registry_)),
      running_job_restarts_(BuildGauge()
                                .Name("plateau_job_restarts")
                                .Help("Restarts so far of each job that "
                                      "holds devices")
                                .Register(*registry_)),
      user_devices_(BuildGauge()
                        .Name("plateau_user_devices")
                        .Help("Devices held by each user's jobs")
                        .Register(*registry_)),
      drained_nodes_(BuildGauge()
                         .Name("plateau_node_drained")
                         .Help("1 for each drained node (no new work), with "
                               "the reason it was drained for")
                         .Register(*registry_)),
      queue_oldest_wait_(BuildGauge()
                             .Name("plateau_queue_oldest_wait_seconds")
                             .Help("How long the job queued longest has "
                                   "waited")
                             .Register(*registry_)
                             .Add({})),
      rpc_requests_(BuildCounter()
                        .Name("plateau_grpc_requests_total")
                        .Help("gRPC requests by method and status code")
                        .Register(*registry_)),
      rpc_latency_(BuildHistogram()
                       .Name("plateau_grpc_request_duration_seconds")
                       .Help("gRPC request latency by method")
                       .Register(*registry_)) {
  SetJobCounts({});
  SetNodeCounts({});
  SetDeviceCounts(0, 0, 0);
}

void DaemonMetrics::JobSubmitted() { jobs_submitted_.Increment(); }

void DaemonMetrics::JobRestarted() { job_restarts_.Increment(); }

void DaemonMetrics::JobPreempted() { jobs_preempted_.Increment(); }

void DaemonMetrics::QueueWait(double seconds) { queue_wait_.Observe(seconds); }

void DaemonMetrics::SchedulingPass(double seconds) {
  scheduling_latency_.Observe(seconds);
}

void DaemonMetrics::SetJobCounts(
    const std::map<v1::JobState, int64_t>& counts) {
  for (int state = v1::JobState_MIN; state <= v1::JobState_MAX; ++state) {
    if (!v1::JobState_IsValid(state) || state == v1::JOB_STATE_UNSPECIFIED) {
      continue;
    }
    auto found = counts.find(static_cast<v1::JobState>(state));
    jobs_.Add({{"state", StateLabel(v1::JobState_Name(state), "JOB_STATE_")}})
        .Set(found == counts.end() ? 0 : static_cast<double>(found->second));
  }
}

void DaemonMetrics::SetNodeCounts(
    const std::map<v1::NodeState, int64_t>& counts) {
  for (int state = v1::NODE_STATE_READY; state <= v1::NODE_STATE_LOST;
       ++state) {
    auto found = counts.find(static_cast<v1::NodeState>(state));
    nodes_
        .Add({{"state", StateLabel(v1::NodeState_Name(state), "NODE_STATE_")}})
        .Set(found == counts.end() ? 0 : static_cast<double>(found->second));
  }
}

void DaemonMetrics::SetDeviceCounts(int64_t allocated, int64_t free,
                                    int64_t unavailable) {
  devices_.Add({{"state", "allocated"}}).Set(static_cast<double>(allocated));
  devices_.Add({{"state", "free"}}).Set(static_cast<double>(free));
  devices_.Add({{"state", "unavailable"}})
      .Set(static_cast<double>(unavailable));
}

void DaemonMetrics::SetRunningJobs(
    const std::vector<RunningJobSample>& jobs,
    const std::map<std::string, int64_t>& devices_by_user) {
  absl::MutexLock lock(&running_mutex_);
  std::map<std::string, prometheus::Gauge*> restarts;
  for (const RunningJobSample& job : jobs) {
    prometheus::Gauge* gauge =
        &running_job_restarts_.Add({{"job", job.job_id}, {"owner", job.owner}});
    gauge->Set(job.restarts);
    restarts[job.job_id] = gauge;
    restarts_by_job_.erase(job.job_id);
  }
  for (const auto& [job_id, gauge] : restarts_by_job_) {
    running_job_restarts_.Remove(gauge);
  }
  restarts_by_job_ = std::move(restarts);
  for (auto& [user, gauge] : devices_by_user_) gauge->Set(0);
  for (const auto& [user, devices] : devices_by_user) {
    prometheus::Gauge*& gauge = devices_by_user_[user];
    if (gauge == nullptr) gauge = &user_devices_.Add({{"user", user}});
    gauge->Set(static_cast<double>(devices));
  }
}

void DaemonMetrics::SetDrainedNodes(
    const std::map<std::string, std::string>& reasons) {
  absl::MutexLock lock(&drained_mutex_);
  for (prometheus::Gauge* series : drained_series_) {
    drained_nodes_.Remove(series);
  }
  drained_series_.clear();
  for (const auto& [node, reason] : reasons) {
    prometheus::Gauge& series =
        drained_nodes_.Add({{"node", node}, {"reason", reason}});
    series.Set(1);
    drained_series_.push_back(&series);
  }
}

void DaemonMetrics::SetQueueOldestWait(double seconds) {
  queue_oldest_wait_.Set(seconds);
}

void DaemonMetrics::RpcFinished(const std::string& method,
                                const std::string& code, double seconds) {
  rpc_requests_.Add({{"method", method}, {"code", code}}).Increment();
  prometheus::Histogram* latency = nullptr;
  {
    absl::MutexLock lock(&rpc_mutex_);
    prometheus::Histogram*& cached = rpc_latency_by_method_[method];
    if (cached == nullptr) {
      cached = &rpc_latency_.Add({{"method", method}}, LatencyBuckets());
    }
    latency = cached;
  }
  latency->Observe(seconds);
}

}  // namespace plateau::daemon
