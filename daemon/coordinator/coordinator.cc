#include "daemon/coordinator/coordinator.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "daemon/scheduler/gang_scheduler.h"
#include "google/protobuf/util/time_util.h"

namespace plateau::daemon {
namespace {

using google::protobuf::util::TimeUtil;

constexpr absl::Duration kWaitReasonInterval = absl::Seconds(1);
constexpr absl::Duration kMinPassInterval = absl::Milliseconds(5);

const std::set<v1::JobState>& LiveStates() {
  static const auto* states = new std::set<v1::JobState>{
      v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLING};
  return *states;
}

absl::Time FromProto(const google::protobuf::Timestamp& time) {
  return absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(time));
}

bool AllocatedOn(const v1::Job& job, const std::string& node) {
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    if (allocation.node() == node) return true;
  }
  return false;
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

void LogError(const absl::Status& status, const std::string& what) {
  if (!status.ok()) std::cerr << "plateaud: " << what << ": " << status << "\n";
}

}  // namespace

std::string RendezvousKey(const std::string& job_id, int32_t attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

Coordinator::Coordinator(JobManager* jobs, NodeRegistry* nodes,
                         RendezvousStore* rendezvous, DaemonMetrics* metrics,
                         Clock clock, const CoordinatorOptions& options)
    : jobs_(jobs),
      nodes_(nodes),
      rendezvous_(rendezvous),
      metrics_(metrics),
      clock_(std::move(clock)),
      options_(options) {}

Coordinator::~Coordinator() {
  {
    absl::MutexLock lock(&wake_mutex_);
    stopping_ = true;
  }
  if (loop_.joinable()) loop_.join();
}

void Coordinator::Start() {
  // Attempts that outlived a restart keep their rendezvous scopes.
  for (const v1::Job& job : jobs_->JobsIn(LiveStates())) {
    rendezvous_->OpenScope(RendezvousKey(job.id(), job.attempt()));
  }
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
  absl::MutexLock lock(&mutex_);
  return PassLocked();
}

absl::Duration Coordinator::PassLocked() {
  ExpireLostNodesLocked();
  const absl::Duration decision = ScheduleLocked();
  metrics_->SchedulingPass(absl::ToDoubleSeconds(decision));
  ExplainWaitsLocked();
  UpdateGaugesLocked();
  return decision;
}

void Coordinator::ExpireLostNodesLocked() {
  absl::StatusOr<std::vector<std::string>> lost = nodes_->ExpireSilentNodes();
  if (!lost.ok()) {
    LogError(lost.status(), "marking silent nodes lost");
    return;
  }
  for (const std::string& node : *lost) {
    for (const v1::Job& job : jobs_->JobsIn(LiveStates())) {
      if (!AllocatedOn(job, node)) continue;
      if (job.state() == v1::JOB_STATE_CANCELLING) {
        EndAttemptIfCompleteLocked(job);
        continue;
      }
      EndAttemptLocked(
          job, AttemptOutcome::kFailed,
          absl::StrCat("node ", node, " lost: no heartbeat for ",
                       absl::FormatDuration(nodes_->node_timeout())));
    }
  }
}

void Coordinator::RefreshSchedulingViewLocked() {
  const std::vector<std::string> changed = jobs_->TakeChangedJobIds();
  const std::set<std::string> ids(changed.begin(), changed.end());
  for (const std::string& id : ids) {
    RemoveFromView(id, view_.waiting, waiting_position_);
    RemoveFromView(id, view_.running, running_position_);
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok()) continue;
    const v1::TrainSpec& train = job->spec().train();
    if (job->state() == v1::JOB_STATE_QUEUED) {
      WaitingJob waiting;
      waiting.job_id = id;
      waiting.owner = job->owner();
      waiting.priority = job->spec().priority();
      waiting.submit_time = FromProto(job->submit_time());
      waiting.nodes = job->spec().resources().nodes();
      waiting.devices_per_node = job->spec().resources().devices_per_node();
      if (train.has_time_limit()) {
        waiting.time_limit = absl::Seconds(train.time_limit().seconds());
      }
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
      if (train.has_time_limit()) {
        auto started = attempt_start_.find({id, job->attempt()});
        const absl::Time start = started != attempt_start_.end()
                                     ? started->second
                                     : FromProto(job->start_time());
        running.expected_end =
            start + absl::Seconds(train.time_limit().seconds());
      }
      running_position_[id] = view_.running.size();
      view_.running.push_back(std::move(running));
    }
  }
}

absl::Duration Coordinator::ScheduleLocked() {
  const auto pass_start = std::chrono::steady_clock::now();
  const absl::Time now = clock_();
  RefreshSchedulingViewLocked();
  SchedulerInput& input = view_;
  input.now = now;
  input.quota_devices = options_.quota_devices;
  input.default_quota_devices = options_.default_quota_devices;
  // Free devices of the schedulable nodes: theirs minus the live attempts'.
  device_use_ = DeviceUse();
  absl::flat_hash_map<std::string, std::vector<int>> allocated;
  for (const RunningJob& running : input.running) {
    for (const NodeDevices& node : running.allocation) {
      std::vector<int>& taken = allocated[node.node];
      taken.insert(taken.end(), node.device_indices.begin(),
                   node.device_indices.end());
      device_use_.allocated += static_cast<int64_t>(node.device_indices.size());
    }
  }
  input.nodes.clear();
  nodes_->VisitSchedulableNodes([&](const v1::Node& node) {
    SchedulableNode schedulable;
    schedulable.name = node.name();
    schedulable.total_devices = node.devices_size();
    const auto taken = allocated.find(node.name());
    for (const v1::Device& device : node.devices()) {
      if (taken == allocated.end() ||
          std::find(taken->second.begin(), taken->second.end(),
                    device.index()) == taken->second.end()) {
        schedulable.free_device_indices.push_back(device.index());
      }
    }
    std::sort(schedulable.free_device_indices.begin(),
              schedulable.free_device_indices.end());
    device_use_.free +=
        static_cast<int64_t>(schedulable.free_device_indices.size());
    input.nodes.push_back(std::move(schedulable));
  });
  input.explain_waiting = false;
  const SchedulerDecision decision = Schedule(input);

  std::vector<PlacedJob> placements;
  for (const Placement& placement : decision.starts) {
    PlacedJob placed;
    placed.job_id = placement.job_id;
    placed.allocation.set_world_size(0);
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
    placements.push_back(std::move(placed));
  }
  if (!placements.empty()) {
    // When each started job was queued, for the queue-wait histogram.
    std::map<std::string, absl::Time> queued_since;
    for (const PlacedJob& placed : placements) {
      absl::StatusOr<v1::Job> job = jobs_->Get(placed.job_id);
      if (job.ok()) queued_since[job->id()] = FromProto(job->update_time());
      const int64_t devices = placed.allocation.world_size();
      device_use_.allocated += devices;
      device_use_.free -= devices;
    }
    absl::StatusOr<std::vector<v1::Job>> scheduled =
        jobs_->Schedule(placements);
    if (!scheduled.ok()) {
      LogError(scheduled.status(), "recording scheduled jobs");
    } else {
      for (const v1::Job& job : *scheduled) {
        metrics_->QueueWait(
            absl::ToDoubleSeconds(now - queued_since[job.id()]));
        attempt_start_[{job.id(), job.attempt()}] = now;
        StartAttemptLocked(job);
      }
    }
  }
  return absl::FromChrono(std::chrono::steady_clock::now() - pass_start);
}

void Coordinator::ExplainWaitsLocked() {
  const absl::Time now = clock_();
  if (now - wait_reasons_time_ < kWaitReasonInterval) return;
  wait_reasons_time_ = now;
  RefreshSchedulingViewLocked();
  view_.explain_waiting = true;
  const SchedulerDecision decision = Schedule(view_);
  std::map<std::string, std::string> reasons;
  for (const auto& [job_id, reason] : decision.waiting) {
    reasons.emplace_hint(reasons.end(), job_id, reason.message);
  }
  jobs_->SetWaitReasons(reasons);
  // Its starts are left to the next pass, which acts on them.
  if (!decision.starts.empty()) Poke();
}

void Coordinator::StartAttemptLocked(const v1::Job& job) {
  const std::string scope = RendezvousKey(job.id(), job.attempt());
  rendezvous_->OpenScope(scope);
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    v1::CoordinatorMessage message;
    v1::StartAttempt& start = *message.mutable_start();
    start.mutable_attempt()->set_job_id(job.id());
    start.mutable_attempt()->set_attempt(job.attempt());
    *start.mutable_spec() = job.spec();
    start.set_world_size(job.allocation().world_size());
    start.set_first_rank(allocation.first_rank());
    *start.mutable_device_indices() = allocation.device_indices();
    start.set_rendezvous_key(scope);
    start.set_checkpoint_location(job.progress().checkpoint_location());
    start.set_checkpoint_dir(absl::StrCat("checkpoints/", job.id()));
    if (!nodes_->Send(allocation.node(), message)) {
      EndAttemptLocked(job, AttemptOutcome::kFailed,
                       absl::StrCat("could not send the start command to node ",
                                    allocation.node()));
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
  stop.mutable_grace_period()->set_seconds(
      absl::ToInt64Seconds(options_.stop_grace_period));
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    nodes_->Send(allocation.node(), message);
  }
}

void Coordinator::EndAttemptLocked(const v1::Job& job, AttemptOutcome outcome,
                                   const std::string& error) {
  absl::StatusOr<v1::Job> ended =
      jobs_->EndAttempt(job.id(), job.attempt(), outcome, error);
  if (!ended.ok()) {
    LogError(ended.status(), absl::StrCat("ending attempt of ", job.id()));
    return;
  }
  if (outcome != AttemptOutcome::kSucceeded) {
    StopRanksLocked(job, error.empty() ? "attempt ended" : error);
  }
  if (ended->state() == v1::JOB_STATE_QUEUED) metrics_->JobRestarted();
  const AttemptKey key{job.id(), job.attempt()};
  finished_nodes_.erase(key);
  attempt_start_.erase(key);
  rendezvous_->DropScope(RendezvousKey(job.id(), job.attempt()));
  Poke();
}

void Coordinator::EndAttemptIfCompleteLocked(const v1::Job& job) {
  const bool cancelling = job.state() == v1::JOB_STATE_CANCELLING;
  const std::set<std::string>& finished =
      finished_nodes_[{job.id(), job.attempt()}];
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    const std::string& node = allocation.node();
    // A lost node cannot confirm a stop; it counts as stopped.
    if (!finished.count(node) && !(cancelling && nodes_->IsLost(node))) {
      return;
    }
  }
  EndAttemptLocked(
      job, cancelling ? AttemptOutcome::kStopped : AttemptOutcome::kSucceeded,
      "");
}

absl::StatusOr<v1::Job> Coordinator::Submit(
    const v1::JobSpec& spec, const std::string& spec_yaml,
    const std::string& owner, const std::string& idempotency_key) {
  absl::StatusOr<v1::Job> job =
      jobs_->Submit(spec, spec_yaml, owner, idempotency_key);
  if (job.ok()) {
    metrics_->JobSubmitted();
    PokeForSubmission();
  }
  return job;
}

absl::StatusOr<v1::Job> Coordinator::Cancel(const std::string& job_id,
                                            const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  absl::StatusOr<v1::Job> job = jobs_->RequestCancel(job_id, reason);
  if (!job.ok() || job->state() != v1::JOB_STATE_CANCELLING) return job;
  StopRanksLocked(*job, reason.empty() ? "cancelled" : reason);
  EndAttemptIfCompleteLocked(*job);
  return jobs_->Get(job_id);
}

absl::StatusOr<v1::Node> Coordinator::SetNodeDrain(const std::string& name,
                                                   bool drain) {
  absl::StatusOr<v1::Node> node = nodes_->SetDrain(name, drain);
  if (node.ok()) Poke();
  return node;
}

std::vector<v1::Node> Coordinator::ListNodes() const {
  std::map<std::pair<std::string, int>, std::string> owners;
  for (const v1::Job& job : jobs_->JobsIn(LiveStates())) {
    for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
      for (int index : allocation.device_indices()) {
        owners[{allocation.node(), index}] = job.id();
      }
    }
  }
  std::vector<v1::Node> nodes = nodes_->Nodes();
  for (v1::Node& node : nodes) {
    for (v1::Device& device : *node.mutable_devices()) {
      auto found = owners.find({node.name(), device.index()});
      if (found != owners.end()) device.set_allocated_job_id(found->second);
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
  // or never got the start command), and attempts it runs that are no
  // longer live here (stale: it should stop them).
  std::vector<v1::Job> lost_attempts;
  std::set<AttemptKey> known;
  for (const v1::Job& job : jobs_->JobsIn(LiveStates())) {
    if (!AllocatedOn(job, name)) continue;
    known.insert({job.id(), job.attempt()});
    if (!reported.count({job.id(), job.attempt()}))
      lost_attempts.push_back(job);
  }
  v1::CoordinatorMessage reply;
  v1::AttachAccepted& accepted = *reply.mutable_accepted();
  accepted.set_node_name(name);
  accepted.mutable_heartbeat_interval()->set_seconds(
      absl::ToInt64Seconds(options_.heartbeat_interval));
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
    return absl::UnavailableError("the Attach stream closed");
  }
  for (const v1::Job& job : lost_attempts) {
    EndAttemptLocked(job, AttemptOutcome::kFailed,
                     absl::StrCat("node ", name, " attached without attempt ",
                                  job.attempt()));
  }
  Poke();
  return absl::OkStatus();
}

void Coordinator::OnDetach(const std::string& node,
                           const NodeConnection* connection) {
  nodes_->Detach(node, connection);
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
        LogError(jobs_->AppendLogLines(attempt.first, attempt.second, lines),
                 "recording worker log lines");
      }
      return;
    }
    default:
      // Heartbeats only refresh liveness; memory and expert-load reports are
      // exported by the worker's own /metrics.
      return;
  }
}

void Coordinator::OnAttemptStatusLocked(const std::string& node,
                                        const v1::AttemptStatus& status) {
  absl::StatusOr<v1::Job> job = jobs_->Get(status.attempt().job_id());
  if (!job.ok() || job->attempt() != status.attempt().attempt() ||
      !LiveStates().count(job->state()) || !AllocatedOn(*job, node)) {
    return;  // stale: an attempt that already ended
  }
  const AttemptKey key{job->id(), job->attempt()};
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
                       status.error().empty() ? "" : ": ", status.error()));
      return;
    case v1::ATTEMPT_PHASE_SUCCEEDED:
    case v1::ATTEMPT_PHASE_STOPPED: {
      if (status.phase() == v1::ATTEMPT_PHASE_STOPPED &&
          job->state() != v1::JOB_STATE_CANCELLING) {
        EndAttemptLocked(
            *job, AttemptOutcome::kFailed,
            absl::StrCat("node ", node, " stopped the attempt unasked"));
        return;
      }
      finished_nodes_[key].insert(node);
      EndAttemptIfCompleteLocked(*job);
      return;
    }
    default:
      return;
  }
}

void Coordinator::UpdateGaugesLocked() {
  metrics_->SetJobCounts(jobs_->CountByState());
  const NodeRegistry::Counts nodes = nodes_->CountByState();
  metrics_->SetNodeCounts(nodes.nodes);
  metrics_->SetDeviceCounts(
      device_use_.allocated, device_use_.free,
      std::max<int64_t>(
          0, nodes.devices - device_use_.allocated - device_use_.free));
}

}  // namespace plateau::daemon
