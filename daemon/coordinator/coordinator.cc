#include "daemon/coordinator/coordinator.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "daemon/admission/admission.h"
#include "daemon/scheduler/gang_scheduler.h"
#include "google/protobuf/util/time_util.h"
#include "nlohmann/json.hpp"
#include "plan/planner.h"
#include "plan/precision_choice.h"
#include "proto/job_spec.h"

namespace plateau::daemon {
namespace {

google::protobuf::Duration DurationProto(absl::Duration duration) {
  return google::protobuf::util::TimeUtil::NanosecondsToDuration(
      absl::ToInt64Nanoseconds(duration));
}

constexpr absl::Duration kWaitReasonInterval = absl::Seconds(1);
// Fair share's use in the store: {"time_ns": N, "use": {"ada": 1.5e6}}.
constexpr char kFairShareKey[] = "fairshare/use";
constexpr absl::Duration kFairShareSaveInterval = absl::Seconds(10);
constexpr absl::Duration kMinPassInterval = absl::Milliseconds(5);

const std::set<v1::JobState>& LiveStates() {
  static const auto* states = new std::set<v1::JobState>{
      v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING, v1::JOB_STATE_PREEMPTING,
      v1::JOB_STATE_CANCELLING};
  return *states;
}

// Its ranks were told to stop (cancel or preemption) and the attempt ends
// once they have.
bool IsStopping(v1::JobState state) {
  return state == v1::JOB_STATE_CANCELLING || state == v1::JOB_STATE_PREEMPTING;
}

// What a re-sent stop says.
std::string StopReason(v1::JobState state) {
  return state == v1::JOB_STATE_PREEMPTING ? "preempted" : "cancelled";
}

bool AllocatedOn(const v1::Job& job, const std::string& node) {
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    if (allocation.node() == node) return true;
  }
  return false;
}

// Whether `node` reported its part of the job's live attempt finished.
bool HasFinished(const v1::Job& job, const std::string& node) {
  return std::find(job.finished_nodes().begin(), job.finished_nodes().end(),
                   node) != job.finished_nodes().end();
}

// The spec the current attempt runs: an elastic job's on the nodes of its
// allocation. JobManager::Schedule placed it only at a size SpecForNodes
// takes.
v1::JobSpec AttemptSpec(const v1::Job& job) {
  return SpecForNodes(job.spec(), job.allocation().nodes_size())
      .value_or(job.spec());
}

std::set<std::string> NodesOf(const v1::Job& job) {
  std::set<std::string> nodes;
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    nodes.insert(allocation.node());
  }
  return nodes;
}

// Removes the element of `items` at positions[id], if any, by moving the last
// element into its place.
template <typename Item>
void RemoveFromView(const std::string& id, std::vector<Item>& items,
                    std::map<std::string, size_t>& positions) {
  auto found = positions.find(id);
  if (found == positions.end()) return;
  const size_t position = found->second;
  positions.erase(found);
  if (position + 1 != items.size()) {
    items[position] = std::move(items.back());
    positions[items[position].job_id] = position;
  }
  items.pop_back();
}

// Ended jobs each pass deletes at most (JobManager::PruneEndedJobs).
constexpr int kPrunedPerPass = 16;

void LogError(const absl::Status& status, const std::string& what) {
  if (!status.ok()) std::cerr << "plateaud: " << what << ": " << status << "\n";
}

}  // namespace

std::string RendezvousKey(const std::string& job_id, int32_t attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

Coordinator::Coordinator(JobManager* jobs, NodeRegistry* nodes,
                         RendezvousStore* rendezvous, DaemonMetrics* metrics,
                         Store* store, Clock clock,
                         const CoordinatorOptions& options)
    : jobs_(jobs),
      nodes_(nodes),
      rendezvous_(rendezvous),
      metrics_(metrics),
      store_(store),
      clock_(std::move(clock)),
      options_(options),
      planning_gate_(options.plans_per_user) {
  if (options_.fair_share_half_life > absl::ZeroDuration()) {
    fair_share_.emplace(options_.shares, /*default_share=*/1.0,
                        options_.fair_share_half_life);
  }
}

Coordinator::~Coordinator() { StopLoop(); }

void Coordinator::StopLoop() {
  {
    absl::MutexLock lock(&wake_mutex_);
    stopping_ = true;
  }
  if (loop_.joinable()) loop_.join();
}

void Coordinator::Start() {
  {
    absl::MutexLock lock(&mutex_);
    if (fair_share_.has_value()) RestoreFairShareLocked();
    const absl::Time now = clock_();
    for (const v1::Job& job : jobs_->JobsIn(LiveStates())) {
      if (job.state() == v1::JOB_STATE_SCHEDULED) {
        // No rank has reported running, so they may be mid-bootstrap; the
        // rendezvous keys they set died with the old process and they cannot
        // finish it. Start over without charging the job a restart.
        EndAttemptLocked(job, AttemptOutcome::kNotStarted,
                         "plateaud restarted while the attempt was starting",
                         {});
        continue;
      }
      // Running attempts have bootstrapped; they keep their (now empty)
      // rendezvous scopes.
      rendezvous_->OpenScope(RendezvousKey(job.id(), job.attempt()));
      // The stop goes out again as their nodes re-attach (OnAttach); the
      // wait for it starts over.
      if (IsStopping(job.state())) {
        stop_sent_[{job.id(), job.attempt()}] = now;
      }
    }
  }
  metrics_->SetDrainedNodes(nodes_->DrainedNodes());
  loop_ = std::thread([this] { Loop(); });
}

void Coordinator::Poke() {
  absl::MutexLock lock(&wake_mutex_);
  poked_ = true;
}

void Coordinator::PokeForSubmission() {
  absl::MutexLock lock(&wake_mutex_);
  // A new job can start only on free devices: with none (a full cluster
  // under a burst of submissions) the pass can wait for the next change or
  // tick instead of running once per submission.
  if (free_devices_ > 0) poked_ = true;
}

void Coordinator::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&wake_mutex_);
      wake_mutex_.AwaitWithTimeout(absl::Condition(
                                       +[](Coordinator* self) {
                                         self->wake_mutex_.AssertReaderHeld();
                                         return self->poked_ || self->stopping_;
                                       },
                                       this),
                                   options_.tick);
      if (stopping_) return;
      poked_ = false;
    }
    BeforePass();
    {
      absl::MutexLock lock(&mutex_);
      PassLocked();
      absl::MutexLock wake_lock(&wake_mutex_);
      free_devices_ = device_use_.free;
    }
    // A storm of pokes (thousands of submissions a second) would otherwise
    // run passes back to back, taking a core from the RPCs.
    absl::SleepFor(kMinPassInterval);
  }
}

absl::Duration Coordinator::RunPass() {
  BeforePass();
  absl::MutexLock lock(&mutex_);
  return PassLocked();
}

void Coordinator::BeforePass() {
  // A few at a time: the pass stays short however many are due.
  LogError(jobs_->PruneEndedJobs(kPrunedPerPass).status(),
           "pruning ended jobs");
  PlanUnplannedJobs();
}

void Coordinator::PlanUnplannedJobs() {
  // From the last pass's view, not a scan of the queue: a job admitted
  // without a plan since then is planned one pass later.
  std::vector<std::string> unplanned;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [job_id, devices_per_node] : unplanned_) {
      unplanned.push_back(job_id);
    }
  }
  for (const std::string& job_id : unplanned) {
    absl::StatusOr<v1::Job> found = jobs_->Get(job_id);
    if (!found.ok() || found->state() != v1::JOB_STATE_QUEUED ||
        found->has_plan()) {
      continue;
    }
    const v1::Job& job = *found;
    const AdmissionDevices devices = AdmissionDevicesFor(job.spec());
    if (devices.device_memory_bytes <= 0) continue;  // still none
    absl::StatusOr<AdmittedJob> admitted = AdmitJob(
        job.spec(), job.spec_yaml(), devices,
        [this](const v1::JobSpec& spec, const plan::PlanOptions& options) {
          return plan_cache_.Plan(spec, options);
        });
    if (absl::IsFailedPrecondition(admitted.status())) {
      LogError(
          jobs_
              ->FailQueued(job.id(), absl::StrCat("the nodes that can hold it "
                                                  "attached, and it does not "
                                                  "fit them: ",
                                                  admitted.status().message()))
              .status(),
          "failing a job that does not fit");
    } else if (!admitted.ok()) {
      LogError(admitted.status(), absl::StrCat("planning ", job.id()));
    } else if (admitted->plan.has_value()) {
      LogError(jobs_
                   ->RecordPlan(job.id(), admitted->spec, admitted->spec_yaml,
                                *admitted->plan,
                                admitted->fp32_alternative.has_value()
                                    ? &*admitted->fp32_alternative
                                    : nullptr)
                   .status(),
               "recording a plan");
    }
  }
}

AdmissionDevices Coordinator::AdmissionDevicesFor(
    const v1::JobSpec& spec) const {
  AdmissionDevices devices;
  devices.any_node = nodes_->HasNodes();
  devices.device_memory_bytes =
      nodes_->LargestDeviceMemoryBytes(spec.resources().devices_per_node());
  devices.host_memory_bytes =
      nodes_->LargestHostMemoryBytes(spec.resources().devices_per_node());
  devices.declared_shapes = options_.node_shapes;
  return devices;
}

absl::Duration Coordinator::PassLocked() {
  EndAttemptsOnLostNodesLocked();
  EndOverdueStopsLocked();
  ExpireHeldDevicesLocked();
  const absl::Duration decision = ScheduleLocked();
  metrics_->SchedulingPass(absl::ToDoubleSeconds(decision));
  ExplainWaitsLocked();
  UpdateGaugesLocked();
  return decision;
}

void Coordinator::EndAttemptsOnLostNodesLocked() {
  // Nodes lost earlier still count when this fails.
  LogError(nodes_->ExpireSilentNodes().status(), "marking silent nodes lost");
  const std::set<std::string> lost = nodes_->LostNodes();
  if (lost.empty()) return;
  std::vector<v1::Job> affected;
  jobs_->VisitJobsIn(LiveStates(), [&](const v1::Job& job) {
    for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
      if (lost.count(allocation.node()) &&
          !HasFinished(job, allocation.node())) {
        affected.push_back(job);
        return;
      }
    }
  });
  for (const v1::Job& job : affected) {
    if (IsStopping(job.state())) {
      EndAttemptIfCompleteLocked(job);  // a lost node counts as stopped
      continue;
    }
    std::string blamed;
    std::set<std::string> done;
    for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
      if (!lost.count(allocation.node())) continue;
      done.insert(allocation.node());
      if (blamed.empty() && !HasFinished(job, allocation.node())) {
        blamed = allocation.node();
      }
    }
    EndAttemptLocked(job, AttemptOutcome::kFailed,
                     absl::StrCat("node ", blamed, " lost: no heartbeat for ",
                                  absl::FormatDuration(nodes_->node_timeout())),
                     done);
  }
}

void Coordinator::EndOverdueStopsLocked() {
  const absl::Time now = clock_();
  const absl::Duration patience =
      options_.stop_grace_period + options_.stop_margin;
  std::vector<AttemptKey> overdue;
  for (const auto& [key, sent] : stop_sent_) {
    if (now - sent > patience) overdue.push_back(key);
  }
  for (const AttemptKey& key : overdue) {
    absl::StatusOr<v1::Job> job = jobs_->Get(key.first);
    if (!job.ok() || job->attempt() != key.second ||
        !IsStopping(job->state())) {
      stop_sent_.erase(key);
      continue;
    }
    // Past the grace period the ranks were killed if they were reachable at
    // all: nothing of them is left to wait for.
    EndAttemptLocked(*job, AttemptOutcome::kStopped,
                     absl::StrCat("no node confirmed the stop within ",
                                  absl::FormatDuration(patience)),
                     NodesOf(*job));
  }
}

void Coordinator::ExpireHeldDevicesLocked() {
  if (held_.empty()) return;
  const absl::Time now = clock_();
  for (auto it = held_.begin(); it != held_.end();) {
    std::map<std::string, std::vector<int>>& nodes = it->second.device_indices;
    if (now >= it->second.until) {
      nodes.clear();
    } else {
      for (auto node = nodes.begin(); node != nodes.end();) {
        node =
            nodes_->IsLost(node->first) ? nodes.erase(node) : std::next(node);
      }
    }
    it = nodes.empty() ? held_.erase(it) : std::next(it);
  }
}

void Coordinator::RefreshSchedulingViewLocked() {
  for (const std::string& id : jobs_->TakeChangedJobIds()) {
    RemoveFromView(id, view_.waiting, waiting_position_);
    RemoveFromView(id, view_.running, running_position_);
    if (auto queued = queued_since_.find(id); queued != queued_since_.end()) {
      queued_by_time_.erase({queued->second, id});
      queued_since_.erase(queued);
    }
    unplanned_.erase(id);
    restarts_.erase(id);
    unchosen_precision_.erase(id);
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok()) continue;
    const v1::TrainSpec& train = job->spec().train();
    if (job->state() == v1::JOB_STATE_QUEUED) {
      const absl::Time since = FromProto(
          job->has_queue_time() ? job->queue_time() : job->submit_time());
      queued_since_[id] = since;
      queued_by_time_.emplace(since, id);
      // Unplanned, its memory is unchecked: it must not be placed.
      if (!job->has_plan()) {
        unplanned_[id] = job->spec().resources().devices_per_node();
        continue;
      }
      if (job->precision_reason().empty()) {
        const v1::MemoryPlan& fp32 = job->fp32_alternative().plan();
        unchosen_precision_[id] = {
            job->spec().precision(), job->spec().gradient_accumulation(),
            job->has_fp32_alternative()
                ? std::max(RequiredDeviceMemoryBytes(fp32),
                           MinNodesRequiredDeviceMemoryBytes(fp32))
                : 0,
            job->attempt() > 0};
      }
      WaitingJob waiting;
      waiting.job_id = id;
      waiting.owner = job->owner();
      waiting.priority = job->spec().priority();
      waiting.submit_time = FromProto(job->submit_time());
      waiting.submission_order = jobs_->SubmissionOrder(id);
      waiting.nodes = job->spec().resources().nodes();
      waiting.devices_per_node = job->spec().resources().devices_per_node();
      if (train.has_time_limit()) {
        waiting.time_limit = absl::Seconds(train.time_limit().seconds());
      }
      waiting.min_device_memory_bytes = RequiredDeviceMemoryBytes(job->plan());
      const std::vector<int32_t> node_counts = AttemptNodeCounts(job->spec());
      waiting.fewer_nodes.assign(node_counts.begin() + 1, node_counts.end());
      // At least the most nodes' need, whatever the plan at min_nodes says.
      waiting.fewer_nodes_device_memory_bytes =
          std::max(waiting.min_device_memory_bytes,
                   MinNodesRequiredDeviceMemoryBytes(job->plan()));
      waiting_position_[id] = view_.waiting.size();
      view_.waiting.push_back(std::move(waiting));
    } else if (LiveStates().count(job->state())) {
      RunningJob running;
      running.job_id = id;
      running.owner = job->owner();
      for (const v1::NodeAllocation& node : job->allocation().nodes()) {
        running.allocation.push_back(
            {node.node(),
             {node.device_indices().begin(), node.device_indices().end()}});
      }
      // The current attempt's start, from the record: right after a
      // restart too, and for a requeued job not its first attempt's.
      running.start_time =
          FromProto(job->has_attempt_start_time() ? job->attempt_start_time()
                                                  : job->start_time());
      if (train.has_time_limit()) {
        running.expected_end =
            running.start_time + absl::Seconds(train.time_limit().seconds());
      }
      running.priority = job->spec().priority();
      running.stopping = IsStopping(job->state());
      // Preemptible again an hour after the oldest of the last
      // max_preemptions_per_hour preemptions.
      const auto& recent = job->recent_preemption_times();
      if (recent.size() >= options_.max_preemptions_per_hour) {
        running.preemptible_from =
            FromProto(
                recent[recent.size() - options_.max_preemptions_per_hour]) +
            absl::Hours(1);
      }
      restarts_[id] = job->restarts();
      running_position_[id] = view_.running.size();
      view_.running.push_back(std::move(running));
    }
  }
}

void Coordinator::RebuildNodesLocked() {
  // Free devices of the schedulable nodes: theirs minus the live attempts'
  // and the held ones.
  device_use_ = DeviceUse();
  absl::flat_hash_map<std::string, std::vector<int>> taken;
  auto take = [&](const std::string& node, const std::vector<int>& indices) {
    std::vector<int>& devices = taken[node];
    devices.insert(devices.end(), indices.begin(), indices.end());
    device_use_.allocated += static_cast<int64_t>(indices.size());
  };
  for (const RunningJob& running : view_.running) {
    for (const NodeDevices& node : running.allocation) {
      take(node.node, node.device_indices);
    }
  }
  for (const auto& [key, held] : held_) {
    for (const auto& [node, indices] : held.device_indices) take(node, indices);
  }
  view_.nodes.clear();
  nodes_->VisitSchedulableNodes([&](const v1::Node& node) {
    SchedulableNode schedulable;
    schedulable.name = node.name();
    schedulable.total_devices = node.devices_size();
    schedulable.device_memory_bytes = plan::NodeDeviceMemoryBytes(node);
    const auto node_taken = taken.find(node.name());
    for (const v1::Device& device : node.devices()) {
      if (node_taken == taken.end() ||
          std::find(node_taken->second.begin(), node_taken->second.end(),
                    device.index()) == node_taken->second.end()) {
        schedulable.free_device_indices.push_back(device.index());
      }
    }
    std::sort(schedulable.free_device_indices.begin(),
              schedulable.free_device_indices.end());
    device_use_.free +=
        static_cast<int64_t>(schedulable.free_device_indices.size());
    view_.nodes.push_back(std::move(schedulable));
  });
}

absl::Duration Coordinator::ScheduleLocked() {
  const auto pass_start = std::chrono::steady_clock::now();
  RefreshSchedulingViewLocked();
  RebuildNodesLocked();
  view_.now = clock_();
  view_.quota_devices = options_.quota_devices;
  view_.default_quota_devices = options_.default_quota_devices;
  view_.preemption_priority_gap = options_.preemption_priority_gap;
  view_.explain_waiting = false;
  UpdateFairShareLocked();
  const SchedulerDecision decision = Schedule(view_);

  std::vector<PlacedJob> placements;
  for (const Placement& placement : decision.starts) {
    PlacedJob placed;
    placed.job_id = placement.job_id;
    int32_t world = 0;
    for (const NodeDevices& node : placement.allocation) {
      v1::NodeAllocation& allocation = *placed.allocation.add_nodes();
      allocation.set_node(node.node);
      allocation.set_first_rank(world);
      for (int index : node.device_indices)
        allocation.add_device_indices(index);
      world += static_cast<int32_t>(node.device_indices.size());
    }
    placed.allocation.set_world_size(world);
    device_use_.allocated += world;
    device_use_.free -= world;
    placements.push_back(std::move(placed));
  }
  for (PlacedJob& placed : placements) ChoosePrecisionLocked(&placed);
  if (!placements.empty()) {
    absl::StatusOr<std::vector<v1::Job>> scheduled =
        jobs_->Schedule(placements);
    if (!scheduled.ok()) {
      LogError(scheduled.status(), "recording scheduled jobs");
    } else {
      for (const v1::Job& job : *scheduled) {
        const google::protobuf::Timestamp& queued =
            job.has_queue_time() ? job.queue_time() : job.submit_time();
        metrics_->QueueWait(absl::ToDoubleSeconds(
            FromProto(job.attempt_start_time()) - FromProto(queued)));
        StartAttemptLocked(job);
      }
    }
  }
  for (const Preemption& preemption : decision.preemptions) {
    PreemptLocked(preemption.victim_job_id, preemption.reason,
                  preemption.preemptor_job_id,
                  absl::StrCat("preempting job ", preemption.victim_job_id,
                               ": ", preemption.reason));
  }
  return absl::FromChrono(std::chrono::steady_clock::now() - pass_start);
}

void Coordinator::ChoosePrecisionLocked(PlacedJob* placed) {
  const auto job = unchosen_precision_.find(placed->job_id);
  if (job == unchosen_precision_.end()) return;  // chosen before
  const UnchosenPrecision& unchosen = job->second;
  v1::JobSpec spec;
  spec.set_precision(unchosen.spec_precision);
  spec.set_gradient_accumulation(unchosen.gradient_accumulation);
  if (plan::IsAutoPrecision(spec) && unchosen.ran_before) {
    // Queued before plateaud chose at first attempts: it ran in bf16,
    // auto's default then, and goes on in it.
    placed->precision = v1::PRECISION_BF16;
    placed->precision_reason = "auto: bf16, as its earlier attempts ran";
    return;
  }
  std::vector<plan::PrecisionDevice> devices;
  int64_t smallest_device_bytes = std::numeric_limits<int64_t>::max();
  if (plan::IsAutoPrecision(spec)) {
    // Only the attempt's nodes: a placing pass must not copy every node.
    for (const v1::NodeAllocation& allocation : placed->allocation.nodes()) {
      const std::optional<v1::Node> node = nodes_->Find(allocation.node());
      if (!node.has_value()) continue;
      smallest_device_bytes =
          std::min(smallest_device_bytes, plan::NodeDeviceMemoryBytes(*node));
      for (const int index : allocation.device_indices()) {
        for (const v1::Device& device : node->devices()) {
          if (device.index() == index) {
            devices.push_back({node->name(), device});
          }
        }
      }
    }
  }
  const plan::PrecisionChoice choice = plan::ChoosePrecision(
      spec, devices,
      unchosen.fp32_device_bytes > 0 &&
          unchosen.fp32_device_bytes <= smallest_device_bytes);
  placed->precision = choice.precision;
  placed->precision_reason = choice.reason;
}

void Coordinator::ExplainWaitsLocked() {
  const absl::Time now = clock_();
  if (now - wait_reasons_time_ < kWaitReasonInterval) return;
  wait_reasons_time_ = now;
  // The jobs this pass started move from waiting to running here; the
  // nodes must lose their devices too, or those would look free, the
  // reasons would be wrong and the explanation would "start" jobs.
  RefreshSchedulingViewLocked();
  RebuildNodesLocked();
  view_.explain_waiting = true;
  UpdateFairShareLocked();
  const SchedulerDecision decision = Schedule(view_);
  std::map<std::string, JobManager::QueuedJob> queue;
  for (const auto& [job_id, reason] : decision.waiting) {
    queue.emplace_hint(queue.end(), job_id,
                       JobManager::QueuedJob{reason.message, reason.position});
  }
  for (const auto& [job_id, devices_per_node] : unplanned_) {
    queue[job_id] = {absl::StrCat(
        "waiting for a node with ", devices_per_node,
        " devices that reports their memory: none has attached yet, and the "
        "job's memory is planned for the first that does")};
  }
  jobs_->SetQueue(queue);
  // Starts that appeared since the decision (devices freed meanwhile) are
  // left to the next pass, which acts on them.
  if (!decision.starts.empty()) Poke();
}

void Coordinator::StartAttemptLocked(const v1::Job& job) {
  const v1::JobSpec attempt_spec = AttemptSpec(job);
  const std::string scope = RendezvousKey(job.id(), job.attempt());
  rendezvous_->OpenScope(scope);
  const auto& allocations = job.allocation().nodes();
  for (int i = 0; i < allocations.size(); ++i) {
    const v1::NodeAllocation& allocation = allocations[i];
    v1::CoordinatorMessage message;
    v1::StartAttempt& start = *message.mutable_start();
    start.mutable_attempt()->set_job_id(job.id());
    start.mutable_attempt()->set_attempt(job.attempt());
    *start.mutable_spec() = attempt_spec;
    start.set_precision_reason(job.precision_reason());
    start.set_world_size(job.allocation().world_size());
    start.set_first_rank(allocation.first_rank());
    *start.mutable_device_indices() = allocation.device_indices();
    start.set_rendezvous_key(scope);
    start.set_checkpoint_location(job.progress().checkpoint_location());
    start.set_checkpoint_dir(absl::StrCat("runs/", job.id()));
    for (const std::string& root : options_.read_roots.For(job.owner())) {
      start.add_read_roots(root);
    }
    *start.mutable_stop_grace_period() =
        DurationProto(options_.stop_grace_period);
    if (!nodes_->Send(allocation.node(), message)) {
      // This node and the ones after it got nothing to run.
      std::set<std::string> unsent;
      for (int j = i; j < allocations.size(); ++j) {
        unsent.insert(allocations[j].node());
      }
      EndAttemptLocked(job, AttemptOutcome::kNotStarted,
                       absl::StrCat("could not send the start command to node ",
                                    allocation.node()),
                       unsent);
      return;
    }
  }
}

void Coordinator::StopRanksLocked(const v1::Job& job,
                                  const std::string& reason) {
  v1::CoordinatorMessage message;
  v1::StopAttempt& stop = *message.mutable_stop();
  stop.mutable_attempt()->set_job_id(job.id());
  stop.mutable_attempt()->set_attempt(job.attempt());
  stop.set_reason(reason);
  *stop.mutable_grace_period() = DurationProto(options_.stop_grace_period);
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    if (HasFinished(job, allocation.node())) continue;
    nodes_->Send(allocation.node(), message);
  }
}

void Coordinator::PreemptLocked(const std::string& victim_id,
                                const std::string& reason,
                                const std::string& preemptor_id,
                                const std::string& preemptor_reason) {
  bool preempted = false;
  absl::StatusOr<v1::Job> victim = jobs_->Preempt(
      victim_id, reason, preemptor_id, preemptor_reason, &preempted);
  if (!victim.ok()) {
    LogError(victim.status(), absl::StrCat("preempting ", victim_id));
    return;
  }
  if (!preempted) return;
  metrics_->JobPreempted();
  StopRanksLocked(*victim, absl::StrCat("preempted: ", reason));
  stop_sent_[{victim->id(), victim->attempt()}] = clock_();
}

void Coordinator::EndAttemptLocked(const v1::Job& job, AttemptOutcome outcome,
                                   const std::string& error,
                                   const std::set<std::string>& done_nodes) {
  bool ended = false;
  absl::StatusOr<v1::Job> after =
      jobs_->EndAttempt(job.id(), job.attempt(), outcome, error, &ended);
  if (!after.ok()) {
    LogError(after.status(), absl::StrCat("ending attempt of ", job.id()));
    return;
  }
  const AttemptKey key{job.id(), job.attempt()};
  stop_sent_.erase(key);
  // Already ended (a second lost node, a late report): nothing to undo.
  if (!ended) return;
  if (outcome != AttemptOutcome::kSucceeded) {
    StopRanksLocked(job, error.empty() ? "attempt ended" : error);
    HoldDevicesLocked(job, done_nodes);
  }
  if (after->restarts() > job.restarts()) metrics_->JobRestarted();
  rendezvous_->DropScope(RendezvousKey(job.id(), job.attempt()));
  Poke();
}

void Coordinator::HoldDevicesLocked(const v1::Job& job,
                                    const std::set<std::string>& done_nodes) {
  HeldDevices held;
  held.until = clock_() + options_.stop_grace_period + options_.stop_margin;
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    const std::string& node = allocation.node();
    if (done_nodes.count(node) || HasFinished(job, node) ||
        nodes_->IsLost(node)) {
      continue;
    }
    held.device_indices[node].assign(allocation.device_indices().begin(),
                                     allocation.device_indices().end());
  }
  if (!held.device_indices.empty()) {
    held_[{job.id(), job.attempt()}] = std::move(held);
  }
}

void Coordinator::ReleaseHeldDevicesLocked(const AttemptKey& attempt,
                                           const std::string& node) {
  auto found = held_.find(attempt);
  if (found == held_.end() || found->second.device_indices.erase(node) == 0) {
    return;
  }
  if (found->second.device_indices.empty()) held_.erase(found);
  Poke();
}

void Coordinator::EndAttemptIfCompleteLocked(const v1::Job& job) {
  const bool stopping = IsStopping(job.state());
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    const std::string& node = allocation.node();
    // A lost node cannot confirm a stop; it counts as stopped.
    if (!HasFinished(job, node) && !(stopping && nodes_->IsLost(node))) {
      return;
    }
  }
  EndAttemptLocked(
      job, stopping ? AttemptOutcome::kStopped : AttemptOutcome::kSucceeded, "",
      NodesOf(job));
}

absl::StatusOr<v1::Job> Coordinator::Submit(
    const v1::JobSpec& spec, const std::string& spec_yaml,
    const std::string& owner, const std::string& idempotency_key) {
  if (!idempotency_key.empty()) {
    // A replayed submission gets its job back, whatever the nodes are now.
    absl::StatusOr<v1::Job> existing =
        jobs_->FindSubmitted(owner, idempotency_key);
    if (existing.ok()) return existing;
  }
  // Before any plan is made for it.
  RETURN_IF_ERROR(jobs_->CheckActiveJobs(owner));
  // Lexically, touching no file: a refusal tells nothing of what exists.
  const std::vector<std::string> read_roots = options_.read_roots.For(owner);
  RETURN_IF_ERROR(
      CheckPathUnderReadRoots("data.path", spec.data().path(), read_roots));
  if (!spec.init_from().empty()) {
    RETURN_IF_ERROR(
        CheckPathUnderReadRoots("init_from", spec.init_from(), read_roots));
  }
  // A plan the cache does not have is made in the owner's turn.
  const Planner in_owners_turn = [this, &owner](
                                     const v1::JobSpec& planned,
                                     const plan::PlanOptions& options) {
    const PlanningGate::Turn turn = planning_gate_.Enter(owner);
    return plan::PlanJob(planned, options);
  };
  absl::StatusOr<AdmittedJob> admitted =
      AdmitJob(spec, spec_yaml, AdmissionDevicesFor(spec),
               [this, &in_owners_turn](const v1::JobSpec& planned,
                                       const plan::PlanOptions& options) {
                 return plan_cache_.Plan(planned, options, in_owners_turn);
               });
  if (!admitted.ok()) return admitted.status();
  bool created = false;
  absl::StatusOr<v1::Job> job = jobs_->Submit(
      admitted->spec, admitted->spec_yaml, owner, idempotency_key, &created,
      admitted->plan.has_value() ? &*admitted->plan : nullptr,
      admitted->fp32_alternative.has_value() ? &*admitted->fp32_alternative
                                             : nullptr);
  // A replayed submission (same idempotency key) is not a new job.
  if (job.ok() && created) {
    metrics_->JobSubmitted();
    PokeForSubmission();
  }
  return job;
}

absl::StatusOr<plan::JobPlan> Coordinator::Plan(const v1::JobSpec& spec,
                                                int64_t device_memory_bytes,
                                                const std::string& user) const {
  plan::PlanOptions options;
  options.device_memory_bytes = device_memory_bytes;
  options.checkpoint_write_bytes_per_second =
      options_.checkpoint_write_bytes_per_second;
  options.stop_grace_seconds =
      absl::ToDoubleSeconds(options_.stop_grace_period);
  if (options.device_memory_bytes <= 0) {
    const absl::StatusOr<int64_t> admission_bytes =
        AdmissionDeviceMemoryBytes(spec, AdmissionDevicesFor(spec));
    if (!admission_bytes.ok()) return admission_bytes.status();
    options.device_memory_bytes = *admission_bytes;
  }
  if (options.device_memory_bytes <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no registered node with ", spec.resources().devices_per_node(),
        " devices reports its device memory, and no node shape is "
        "declared: give the device memory to plan for"));
  }
  const PlanningGate::Turn turn = planning_gate_.Enter(user);
  return plan::PlanForNodes(spec, options, nodes_->Nodes());
}

absl::StatusOr<v1::Job> Coordinator::Cancel(const std::string& job_id,
                                            const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  absl::StatusOr<v1::Job> job = jobs_->RequestCancel(job_id, reason);
  if (!job.ok() || job->state() != v1::JOB_STATE_CANCELLING) return job;
  StopRanksLocked(*job, reason.empty() ? "cancelled" : reason);
  stop_sent_[{job->id(), job->attempt()}] = clock_();
  EndAttemptIfCompleteLocked(*job);
  return jobs_->Get(job_id);
}

absl::StatusOr<v1::Node> Coordinator::SetNodeDrain(const std::string& name,
                                                   bool drain,
                                                   const std::string& reason,
                                                   bool preempt) {
  absl::StatusOr<v1::Node> node = nodes_->SetDrain(name, drain, reason);
  if (!node.ok()) return node;
  metrics_->SetDrainedNodes(nodes_->DrainedNodes());
  if (drain && preempt) {
    absl::MutexLock lock(&mutex_);
    std::vector<std::string> on_node;
    jobs_->VisitJobsIn(
        {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING},
        [&](const v1::Job& job) {
          if (AllocatedOn(job, name) && !HasFinished(job, name)) {
            on_node.push_back(job.id());
          }
        });
    const std::string why =
        absl::StrCat("node ", name, " is draining",
                     reason.empty() ? "" : absl::StrCat(" (", reason, ")"));
    for (const std::string& job_id : on_node) {
      PreemptLocked(job_id, why, "", "");
    }
  }
  Poke();
  return node;
}

std::vector<v1::Node> Coordinator::ListNodes(
    const std::function<bool(const std::string& owner)>& shows_owner) const {
  // Device -> the job holding it, "" when it is not to be shown.
  std::map<std::pair<std::string, int>, std::string> holders;
  jobs_->VisitJobsIn(LiveStates(), [&](const v1::Job& job) {
    const bool shown = shows_owner == nullptr || shows_owner(job.owner());
    for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
      for (int index : allocation.device_indices()) {
        holders[{allocation.node(), index}] = shown ? job.id() : "";
      }
    }
  });
  std::vector<v1::Node> nodes = nodes_->Nodes();
  for (v1::Node& node : nodes) {
    for (v1::Device& device : *node.mutable_devices()) {
      auto found = holders.find({node.name(), device.index()});
      if (found != holders.end()) {
        device.set_allocated_job_id(found->second);
        device.set_allocated(true);
      }
    }
  }
  return nodes;
}

absl::Status Coordinator::OnAttach(const v1::WorkerHello& hello,
                                   std::shared_ptr<NodeConnection> connection) {
  absl::MutexLock lock(&mutex_);
  const std::string& name = hello.node_name();
  std::set<AttemptKey> reported;
  for (const v1::AttemptRef& attempt : hello.running_attempts()) {
    reported.insert({attempt.job_id(), attempt.attempt()});
  }
  // Live attempts placed on this node that it no longer runs (it restarted,
  // or never got the start command) unless it had finished its part;
  // attempts being cancelled that it still runs (it may have missed the
  // stop); and attempts it runs that are no longer live here (stale: it
  // should stop them).
  std::vector<v1::Job> lost_attempts;
  std::vector<v1::Job> to_stop;
  std::set<AttemptKey> known;
  jobs_->VisitJobsIn(LiveStates(), [&](const v1::Job& job) {
    if (!AllocatedOn(job, name)) return;
    const AttemptKey key{job.id(), job.attempt()};
    known.insert(key);
    if (!reported.count(key)) {
      if (!HasFinished(job, name)) lost_attempts.push_back(job);
    } else if (IsStopping(job.state())) {
      to_stop.push_back(job);
    }
  });
  v1::CoordinatorMessage reply;
  v1::AttachAccepted& accepted = *reply.mutable_accepted();
  accepted.set_node_name(name);
  *accepted.mutable_heartbeat_interval() =
      DurationProto(options_.heartbeat_interval);
  *accepted.mutable_rank_lease() = DurationProto(options_.rank_lease);
  for (const AttemptKey& key : reported) {
    if (known.count(key)) continue;
    v1::AttemptRef& stale = *accepted.add_stale_attempts();
    stale.set_job_id(key.first);
    stale.set_attempt(key.second);
  }
  // Registered first, so that the accept means "you are known". The accept
  // is still the stream's first message: every send to a node happens under
  // mutex_, held here.
  absl::StatusOr<v1::Node> node = nodes_->Attach(hello, connection);
  if (!node.ok()) return node.status();
  if (!connection->Send(reply)) {
    nodes_->Detach(name, connection.get());
    return absl::UnavailableError("the Attach stream closed");
  }
  // Ended attempts the node does not run any more hold none of its devices.
  for (auto it = held_.begin(); it != held_.end();) {
    if (!reported.count(it->first)) {
      it->second.device_indices.erase(name);
    }
    it = it->second.device_indices.empty() ? held_.erase(it) : std::next(it);
  }
  const absl::Time now = clock_();
  for (const v1::Job& job : to_stop) {
    v1::CoordinatorMessage message;
    v1::StopAttempt& stop = *message.mutable_stop();
    stop.mutable_attempt()->set_job_id(job.id());
    stop.mutable_attempt()->set_attempt(job.attempt());
    stop.set_reason(StopReason(job.state()));
    *stop.mutable_grace_period() = DurationProto(options_.stop_grace_period);
    nodes_->Send(name, message);
    stop_sent_[{job.id(), job.attempt()}] = now;
  }
  for (const AttemptKey& key : reported) {
    if (known.count(key)) {
      LogError(jobs_->RecordReadopted(key.first, key.second, name),
               "recording a re-adopted attempt");
    }
  }
  for (const v1::Job& job : lost_attempts) {
    if (IsStopping(job.state())) {
      // Not running it is as good as having stopped it.
      absl::StatusOr<v1::Job> updated =
          jobs_->RecordNodeFinished(job.id(), job.attempt(), name);
      if (updated.ok()) EndAttemptIfCompleteLocked(*updated);
      LogError(updated.status(), "recording a stopped node");
      continue;
    }
    EndAttemptLocked(job, AttemptOutcome::kFailed,
                     absl::StrCat("node ", name, " attached without attempt ",
                                  job.attempt()),
                     {name});
  }
  Poke();
  return absl::OkStatus();
}

void Coordinator::OnDetach(const std::string& node,
                           NodeConnection* connection) {
  nodes_->Detach(node, connection);
  const std::vector<v1::AttemptRef> unsent = connection->TakeUnsentStarts();
  if (unsent.empty()) return;
  absl::MutexLock lock(&mutex_);
  for (const v1::AttemptRef& attempt : unsent) {
    absl::StatusOr<v1::Job> job = jobs_->Get(attempt.job_id());
    if (!job.ok() || job->attempt() != attempt.attempt() ||
        job->state() != v1::JOB_STATE_SCHEDULED || !AllocatedOn(*job, node)) {
      continue;
    }
    EndAttemptLocked(
        *job, AttemptOutcome::kNotStarted,
        absl::StrCat("the start command never reached node ", node), {node});
  }
}

bool Coordinator::NodeMayUseScope(const std::string& node,
                                  const std::string& scope) const {
  const size_t slash = scope.rfind('/');
  int32_t attempt = 0;
  if (slash == std::string::npos ||
      !absl::SimpleAtoi(scope.substr(slash + 1), &attempt)) {
    return false;
  }
  return jobs_->IsLiveAttemptOn(scope.substr(0, slash), attempt, node);
}

void Coordinator::OnWorkerMessage(const std::string& node,
                                  const v1::WorkerMessage& message) {
  nodes_->Heartbeat(node);
  switch (message.body_case()) {
    case v1::WorkerMessage::kAttemptStatus: {
      absl::MutexLock lock(&mutex_);
      OnAttemptStatusLocked(node, message.attempt_status());
      return;
    }
    case v1::WorkerMessage::kProgress: {
      const v1::AttemptRef& attempt = message.progress().attempt();
      // Only the attempt's own nodes speak for it.
      if (!jobs_->IsLiveAttemptOn(attempt.job_id(), attempt.attempt(), node)) {
        return;
      }
      const v1::JobProgress& progress = message.progress().progress();
      LogError(jobs_->MarkRunning(attempt.job_id(), attempt.attempt()),
               "recording a running attempt");
      LogError(
          jobs_->RecordProgress(attempt.job_id(), attempt.attempt(), progress),
          "recording progress");
      if (progress.checkpoint_step() > 0) {
        LogError(jobs_->RecordCheckpoint(attempt.job_id(), attempt.attempt(),
                                         progress.checkpoint_step(),
                                         progress.checkpoint_location()),
                 "recording a checkpoint");
      }
      return;
    }
    case v1::WorkerMessage::kLogs: {
      std::map<AttemptKey, std::vector<v1::WorkerLogLine>> by_attempt;
      for (const v1::WorkerLogLine& line : message.logs().lines()) {
        v1::WorkerLogLine copy = line;
        copy.set_node(node);
        by_attempt[{line.job_id(), line.attempt()}].push_back(std::move(copy));
      }
      for (const auto& [attempt, lines] : by_attempt) {
        if (!jobs_->IsLiveAttemptOn(attempt.first, attempt.second, node)) {
          continue;
        }
        LogError(jobs_->AppendLogLines(attempt.first, attempt.second, lines),
                 "recording worker log lines");
      }
      return;
    }
    case v1::WorkerMessage::kMemory: {
      const v1::AttemptRef& attempt = message.memory().attempt();
      if (!jobs_->IsLiveAttemptOn(attempt.job_id(), attempt.attempt(), node)) {
        return;
      }
      LogError(jobs_->RecordMemory(attempt.job_id(), attempt.attempt(),
                                   {message.memory().ranks().begin(),
                                    message.memory().ranks().end()}),
               "recording memory");
      return;
    }
    default:
      // Heartbeats only refresh liveness; expert load is exported by the
      // worker's own /metrics.
      return;
  }
}

void Coordinator::OnAttemptStatusLocked(const std::string& node,
                                        const v1::AttemptStatus& status) {
  const AttemptKey key{status.attempt().job_id(), status.attempt().attempt()};
  if (status.phase() == v1::ATTEMPT_PHASE_SUCCEEDED ||
      status.phase() == v1::ATTEMPT_PHASE_FAILED ||
      status.phase() == v1::ATTEMPT_PHASE_STOPPED) {
    // Its ranks on this node are gone, whether the attempt ended or not.
    ReleaseHeldDevicesLocked(key, node);
  }
  absl::StatusOr<v1::Job> job = jobs_->Get(key.first);
  if (!job.ok() || job->attempt() != key.second ||
      !LiveStates().count(job->state()) || !AllocatedOn(*job, node)) {
    return;  // stale: an attempt that already ended, or not this node's
  }
  switch (status.phase()) {
    case v1::ATTEMPT_PHASE_STARTING:
      return;
    case v1::ATTEMPT_PHASE_RUNNING:
      LogError(jobs_->MarkRunning(job->id(), job->attempt()),
               "recording a running attempt");
      return;
    case v1::ATTEMPT_PHASE_FAILED:
      EndAttemptLocked(
          *job, AttemptOutcome::kFailed,
          absl::StrCat("rank ", status.failed_rank(), " on node ", node,
                       " exited with status ", status.exit_code(),
                       status.error().empty() ? "" : ": ", status.error()),
          {node});
      return;
    case v1::ATTEMPT_PHASE_SUCCEEDED:
    case v1::ATTEMPT_PHASE_STOPPED: {
      if (status.phase() == v1::ATTEMPT_PHASE_STOPPED &&
          !IsStopping(job->state())) {
        EndAttemptLocked(
            *job, AttemptOutcome::kFailed,
            absl::StrCat("node ", node, " stopped the attempt unasked"),
            {node});
        return;
      }
      // Persisted: the node's part is done even if it is lost or plateaud
      // restarts before the others finish.
      absl::StatusOr<v1::Job> updated =
          jobs_->RecordNodeFinished(job->id(), job->attempt(), node);
      if (!updated.ok()) {
        LogError(updated.status(), "recording a finished node");
        return;
      }
      EndAttemptIfCompleteLocked(*updated);
      return;
    }
    default:
      return;
  }
}

void Coordinator::UpdateFairShareLocked() {
  if (!fair_share_.has_value()) return;
  std::map<std::string, int64_t> devices_by_user;
  for (const RunningJob& job : view_.running) {
    int64_t& devices = devices_by_user[job.owner];
    for (const NodeDevices& node : job.allocation) {
      devices += static_cast<int64_t>(node.device_indices.size());
    }
  }
  const absl::Time now = clock_();
  fair_share_->Advance(now, devices_by_user);
  for (WaitingJob& job : view_.waiting) {
    job.use_per_share = fair_share_->UsePerShare(job.owner);
  }
  if (now - fair_share_saved_ < kFairShareSaveInterval) return;
  nlohmann::json use = nlohmann::json::object();
  for (const auto& [user, device_seconds] : fair_share_->use()) {
    use[user] = device_seconds;
  }
  WriteBatch batch;
  batch.Put(
      kFairShareKey,
      nlohmann::json{{"time_ns", absl::ToUnixNanos(fair_share_->time())},
                     {"use", use}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  const absl::Status written = store_->Write(batch, {.sync = false});
  LogError(written, "keeping fair share's use");
  if (written.ok()) fair_share_saved_ = now;
}

void Coordinator::RestoreFairShareLocked() {
  absl::StatusOr<std::optional<std::string>> kept = store_->Get(kFairShareKey);
  if (!kept.ok() || !kept->has_value()) {
    LogError(kept.status(), "reading fair share's use");
    return;
  }
  const nlohmann::json json =
      nlohmann::json::parse(**kept, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("time_ns") ||
      !json["time_ns"].is_number_integer() || !json.contains("use") ||
      !json["use"].is_object()) {
    std::cerr << "plateaud: fair share's use in the store is unreadable; "
                 "everyone starts from zero\n";
    return;
  }
  std::map<std::string, double> use;
  for (const auto& [user, device_seconds] : json["use"].items()) {
    if (device_seconds.is_number()) use[user] = device_seconds.get<double>();
  }
  fair_share_->Restore(absl::FromUnixNanos(json["time_ns"].get<int64_t>()),
                       std::move(use));
}

void Coordinator::UpdateGaugesLocked() {
  metrics_->SetJobCounts(jobs_->CountByState());
  std::vector<DaemonMetrics::RunningJobSample> running;
  std::map<std::string, int64_t> devices_by_user;
  for (const RunningJob& job : view_.running) {
    running.push_back({job.job_id, job.owner, restarts_[job.job_id]});
    int64_t& devices = devices_by_user[job.owner];
    for (const NodeDevices& node : job.allocation) {
      devices += static_cast<int64_t>(node.device_indices.size());
    }
  }
  metrics_->SetRunningJobs(running, devices_by_user);
  const absl::Time now = clock_();
  const absl::Time oldest = queued_by_time_.empty()
                                ? now
                                : std::min(now, queued_by_time_.begin()->first);
  metrics_->SetQueueOldestWait(absl::ToDoubleSeconds(now - oldest));
  const NodeRegistry::Counts nodes = nodes_->CountByState();
  metrics_->SetNodeCounts(nodes.nodes);
  metrics_->SetDeviceCounts(
      device_use_.allocated, device_use_.free,
      std::max<int64_t>(
          0, nodes.devices - device_use_.allocated - device_use_.free));
}

}  // namespace plateau::daemon
