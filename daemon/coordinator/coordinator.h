// The control loop of plateaud: turns submissions, cancels, worker reports
// and node losses into job transitions, scheduling passes and commands to
// workers. Its state that must survive a restart is in the JobManager and
// NodeRegistry (persisted), so a restarted plateaud carries on from them:
// running attempts are re-adopted when their nodes re-attach and report
// them, and requeued when the nodes do not re-attach within node_timeout.
// Its own, fair share's use, it keeps in their store now and then.
//
// Attempt outcomes:
// - every node of the attempt reports SUCCEEDED            -> SUCCEEDED
// - a node reports FAILED, a node of it is LOST (checked
//   on every pass, so nodes lost before a restart count
//   too), or a node re-attaches without the attempt        -> requeued or
//                                                             FAILED (after
//                                                             max_restarts)
// - its start command could not be sent to a node, or
//   plateaud restarted while it was SCHEDULED (its ranks'
//   rendezvous keys died with the old process)             -> requeued
//                                                             without using
//                                                             a restart
// - cancel: every node reports STOPPED or is lost, or no
//   confirmation comes within stop_grace_period +
//   stop_margin of the (last) stop sent                    -> CANCELLED
// - preemption: likewise                                   -> requeued
//                                                             without using
//                                                             a restart
// Preemption (preemption_priority_gap > 0): when the scheduler picks
// victims for a job that cannot start (gang_scheduler.h), each goes
// PREEMPTING and its ranks are stopped: they checkpoint at the next step
// boundary (the trainer's stop) and exit, so the requeued job resumes
// having lost no finished step. A job is preempted at most
// max_preemptions_per_hour times in any hour (drains excepted: the operator
// asked). Both jobs' histories say who preempted whom and why.
// A node that reported SUCCEEDED has done its part (Job.finished_nodes):
// losing it, or its re-attaching without the attempt, changes nothing.
// Whatever ends an attempt stops its ranks on every other node, and their
// devices stay out of scheduling until the node reports the attempt STOPPED
// or FAILED, is lost, re-attaches without it, or stop_grace_period +
// stop_margin pass. A node re-attaching with an attempt that is being
// cancelled gets the stop again.
//
// Thread-safe: control actions are serialized by one mutex; submissions and
// reads go straight to the JobManager.
#ifndef PLATEAU_DAEMON_COORDINATOR_COORDINATOR_H_
#define PLATEAU_DAEMON_COORDINATOR_COORDINATOR_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/read_roots.h"
#include "daemon/admission/admission.h"
#include "daemon/coordinator/planning_gate.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/nodes/node_registry.h"
#include "daemon/rendezvous/rendezvous_store.h"
#include "daemon/scheduler/fair_share.h"
#include "daemon/scheduler/gang_scheduler.h"
#include "proto/worker.pb.h"

namespace plateau::daemon {

struct CoordinatorOptions {
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // Granted to every node that attaches (AttachAccepted.rank_lease).
  absl::Duration rank_lease = absl::ZeroDuration();
  // The loop runs at least this often (node timeouts), and after every
  // change that can start a job.
  absl::Duration tick = absl::Milliseconds(500);
  // Ranks get this long to stop (SIGTERM, then SIGKILL).
  absl::Duration stop_grace_period = absl::Seconds(30);
  // How much longer a stop may take to be confirmed before its ranks are
  // taken as gone: a cancel ends, held devices are free again.
  absl::Duration stop_margin = absl::Seconds(10);
  // A node's checkpoint write rate, for the plans Plan makes.
  double checkpoint_write_bytes_per_second = 1e9;
  std::map<std::string, int> quota_devices;  // per user
  int default_quota_devices = 0;             // 0: unlimited
  // Fair share (fair_share.h): each user's share (the tokens file's
  // `share`; 1 for users without one) and the half-life of their use; a
  // zero half-life turns it off (equal priorities then go first come,
  // first served). The use is kept in the store every
  // kFairShareSaveInterval and taken up again by Start().
  std::map<std::string, double> shares;
  absl::Duration fair_share_half_life = absl::Hours(24 * 7);
  // A waiting job may preempt running jobs this much lower in priority; 0
  // turns preemption off.
  int preemption_priority_gap = 0;
  // No job is preempted by the scheduler more often than this in any hour.
  // REQUIRES: >= 1.
  int max_preemptions_per_hour = 2;
  // The kinds of node the cluster has or will have (--node_shapes); empty:
  // only the attached nodes count.
  std::vector<NodeShape> node_shapes;
  // Plans (Submit's admission, Plan) each user may have made at once
  // (planning_gate.h). REQUIRES: >= 1.
  int plans_per_user = 1;
  // Where each user's jobs may read data and models from: checked at
  // submit, and sent with every attempt for the ranks to enforce.
  ReadRoots read_roots;
};

class Coordinator {
 public:
  // `store` keeps fair share's use across restarts (the JobManager's and
  // NodeRegistry's store).
  Coordinator(JobManager* jobs, NodeRegistry* nodes,
              RendezvousStore* rendezvous, DaemonMetrics* metrics, Store* store,
              Clock clock, const CoordinatorOptions& options);
  ~Coordinator();

  // Recovers from the job records (attempts that were still SCHEDULED are
  // requeued without using a restart; cancels and preemptions in progress
  // wait for their stops from now) and fair share's use from the store,
  // then starts the control loop.
  void Start();

  // ---- API side ----
  // Admits the job (admission.h: its memory plan for the registered nodes'
  // and the declared node shapes' devices; FAILED_PRECONDITION when it
  // cannot fit them) and queues it. A job with a plan is placed only on
  // nodes whose devices have the memory it needs
  // (RequiredDeviceMemoryBytes). A job admitted without one (no node could
  // hold it yet) is never placed: it waits, saying so, until a node that
  // can hold it attaches; then the loop plans it, and fails it if it does
  // not fit.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec,
                                 const std::string& spec_yaml,
                                 const std::string& owner,
                                 const std::string& idempotency_key);
  // The memory plan of `spec` (which passed ValidateJobSpec) for
  // device_memory_bytes per device, or when 0 for the devices admission
  // would plan it for, with the reach searched, and precision: auto chosen
  // for the nodes (plan::PlanForNodes): `plateau plan` made by plateaud.
  // FAILED_PRECONDITION when there are none to plan for.
  // Made in `user`'s turn (CoordinatorOptions::plans_per_user), as
  // Submit's admission is in the owner's.
  absl::StatusOr<plan::JobPlan> Plan(const v1::JobSpec& spec,
                                     int64_t device_memory_bytes,
                                     const std::string& user) const;
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id,
                                 const std::string& reason);
  // NodeRegistry::SetDrain. The node's running attempts go on, or with
  // `preempt` (drain only) are preempted, whatever their priority and past
  // preemptions: they checkpoint, stop and are requeued, to run elsewhere.
  absl::StatusOr<v1::Node> SetNodeDrain(const std::string& name, bool drain,
                                        const std::string& reason,
                                        bool preempt = false);
  // Every node, with each device's allocated flag and, when `shows_owner`
  // is unset or says yes for the job's owner, its allocated_job_id.
  // What plans need of the cluster beside its nodes (ListNodesResponse).
  absl::Duration stop_grace_period() const {
    return options_.stop_grace_period;
  }
  double checkpoint_write_bytes_per_second() const {
    return options_.checkpoint_write_bytes_per_second;
  }
  std::vector<v1::Node> ListNodes(
      const std::function<bool(const std::string& owner)>& shows_owner =
          nullptr) const;

  // ---- Worker side ----
  // Registers the node, sends AttachAccepted on `connection` (its first
  // message), and ends the attempts placed on the node that it does not
  // report.
  absl::Status OnAttach(const v1::WorkerHello& hello,
                        std::shared_ptr<NodeConnection> connection);
  // The stream ended (after its handler's last use of it). Attempts whose
  // start command never reached the node are requeued without using a
  // restart.
  void OnDetach(const std::string& node, NodeConnection* connection);
  // Reports on an attempt count only from the nodes the attempt runs on.
  void OnWorkerMessage(const std::string& node,
                       const v1::WorkerMessage& message);
  // Whether `node` is attached over a live connection.
  bool IsNodeAttached(const std::string& node) const {
    return nodes_->IsConnected(node);
  }
  // Whether `node` may use the rendezvous scope `scope`: that of a live
  // attempt with devices on it.
  bool NodeMayUseScope(const std::string& node, const std::string& scope) const;

  // One pass of the loop, now (tests and benchmarks); returns how long its
  // scheduling decision took.
  absl::Duration RunPass();
  // Ends the background loop: passes then run only through RunPass, so that
  // a benchmark can time the pass that acts on a change. Idempotent.
  void StopLoop();

 private:
  using AttemptKey = std::pair<std::string, int32_t>;

  void Loop();
  // What a pass does outside mutex_: prunes ended jobs past their
  // retention (a few per pass), then PlanUnplannedJobs.
  void BeforePass();
  // Plans the queued jobs admitted without a plan (unplanned_) for which a
  // node that can hold them has attached since: records the plan, or fails a
  // job that does not fit. Planning runs outside mutex_: it takes up to
  // seconds.
  void PlanUnplannedJobs();
  // What admission plans `spec` for now.
  AdmissionDevices AdmissionDevicesFor(const v1::JobSpec& spec) const;
  void Poke();
  void PokeForSubmission();
  // Returns how long the scheduling decision took.
  absl::Duration PassLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Marks silent nodes lost, then ends every live attempt with a LOST node
  // that had not finished its part: not only the nodes lost in this pass, as
  // plateaud may have died between persisting LOST and ending the attempt.
  void EndAttemptsOnLostNodesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends cancels and preemptions whose stop went unconfirmed for
  // stop_grace_period + stop_margin.
  void EndOverdueStopsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Frees held devices whose time is up or whose node is lost.
  void ExpireHeldDevicesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Decides and starts what can start; returns how long that took.
  absl::Duration ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // For a queued job that has not run yet (unchosen_precision_): the
  // precision its attempt runs in on the devices `placed` gives it
  // (plan/precision_choice.h), and why, into `placed`.
  void ChoosePrecisionLocked(PlacedJob* placed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Every kWaitReasonInterval: records why each queued job waits. Runs after
  // the decision, off its path: explaining 10,000 jobs costs more than
  // deciding for them.
  void ExplainWaitsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Brings view_'s jobs up to date with the jobs changed since the last
  // pass.
  void RefreshSchedulingViewLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Rebuilds view_.nodes: the schedulable nodes' devices not taken by
  // view_.running or held; and device_use_.
  void RebuildNodesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void StartAttemptLocked(const v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends the job's current attempt with `outcome`. Only if that ended it (it
  // was not stale already): stops its ranks and holds their devices (except
  // on `done_nodes`, known to run none of its ranks), drops its rendezvous
  // scope and counts a restart.
  void EndAttemptLocked(const v1::Job& job, AttemptOutcome outcome,
                        const std::string& error,
                        const std::set<std::string>& done_nodes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void StopRanksLocked(const v1::Job& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // JobManager::Preempt, then stops the victim's ranks.
  void PreemptLocked(const std::string& victim_id, const std::string& reason,
                     const std::string& preemptor_id,
                     const std::string& preemptor_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Keeps the devices of an ended attempt out of scheduling on each node not
  // in `done_nodes` that may still run its ranks.
  void HoldDevicesLocked(const v1::Job& job,
                         const std::set<std::string>& done_nodes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // `node` runs no rank of `attempt` any more: its held devices are free.
  void ReleaseHeldDevicesLocked(const AttemptKey& attempt,
                                const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends the attempt once every node of it has finished (or, when
  // cancelling or preempting, finished or been lost).
  void EndAttemptIfCompleteLocked(const v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void OnAttemptStatusLocked(const std::string& node,
                             const v1::AttemptStatus& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Advances fair share to now by the devices view_.running holds, gives
  // each waiting job its owner's use per share, and keeps the use in the
  // store (without sync) when it was last kept kFairShareSaveInterval ago.
  void UpdateFairShareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes up the use kept in the store, if any.
  void RestoreFairShareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Devices in use and free on schedulable nodes after the last pass.
  struct DeviceUse {
    int64_t allocated = 0;
    int64_t free = 0;
  };
  // Devices of an ended attempt whose ranks may still be running.
  struct HeldDevices {
    absl::Time until;
    std::map<std::string, std::vector<int>> device_indices;  // by node
  };

  JobManager* const jobs_;
  NodeRegistry* const nodes_;
  RendezvousStore* const rendezvous_;
  DaemonMetrics* const metrics_;
  Store* const store_;
  const Clock clock_;
  const CoordinatorOptions options_;

  // Wakes the loop; never held while taking mutex_.
  absl::Mutex wake_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  bool poked_ ABSL_GUARDED_BY(wake_mutex_) = false;
  bool stopping_ ABSL_GUARDED_BY(wake_mutex_) = false;
  // Free devices after the loop's last pass (for PokeForSubmission).
  int64_t free_devices_ ABSL_GUARDED_BY(wake_mutex_) = 1;
  absl::Mutex mutex_;
  // When the stop of each attempt being cancelled or preempted was last
  // sent.
  std::map<AttemptKey, absl::Time> stop_sent_ ABSL_GUARDED_BY(mutex_);
  std::map<AttemptKey, HeldDevices> held_ ABSL_GUARDED_BY(mutex_);
  DeviceUse device_use_ ABSL_GUARDED_BY(mutex_);
  // The scheduler's input, kept up to date from the jobs that changed rather
  // than rebuilt from every job record on every pass (a pass over 10,000
  // waiting jobs would spend most of its time copying them). Nodes are
  // rebuilt for every decision; positions index view_.waiting and
  // view_.running.
  SchedulerInput view_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, size_t> waiting_position_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, size_t> running_position_ ABSL_GUARDED_BY(mutex_);
  // Queued jobs without a plan, kept out of view_ until planned, with their
  // devices per node (for their wait reason).
  std::map<std::string, int> unplanned_ ABSL_GUARDED_BY(mutex_);
  // Queued jobs whose precision is not chosen yet, with what choosing it
  // takes: the spec's (unspecified for auto) and, for auto, its gradient
  // accumulation, the device memory its fp32 plan needs (0 without one:
  // fp32 does not fit), and whether an attempt ran before plateaud chose
  // at first attempts.
  struct UnchosenPrecision {
    v1::Precision spec_precision = v1::PRECISION_UNSPECIFIED;
    v1::GradientAccumulation gradient_accumulation =
        v1::GRADIENT_ACCUMULATION_UNSPECIFIED;
    // fp32's need at every size the job may run at (an elastic job's
    // larger end, so that choosing fp32 never costs it its smaller sizes).
    int64_t fp32_device_bytes = 0;
    bool ran_before = false;
  };
  std::map<std::string, UnchosenPrecision> unchosen_precision_
      ABSL_GUARDED_BY(mutex_);
  // When each queued job entered the queue, by job and by time (the oldest
  // wait, for its gauge, without a walk over the queue every pass).
  std::map<std::string, absl::Time> queued_since_ ABSL_GUARDED_BY(mutex_);
  std::set<std::pair<absl::Time, std::string>> queued_by_time_
      ABSL_GUARDED_BY(mutex_);
  // Restarts of each job in view_.running, kept with the view rather than
  // read from every running job's record on every pass.
  std::map<std::string, int32_t> restarts_ ABSL_GUARDED_BY(mutex_);
  // When ExplainWaitsLocked last ran.
  absl::Time wait_reasons_time_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  // Each user's decayed use; unset with fair share off.
  std::optional<FairShare> fair_share_ ABSL_GUARDED_BY(mutex_);
  // When it was last written to the store.
  absl::Time fair_share_saved_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  // Plans of recent submissions (admission); thread-safe on its own.
  PlanCache plan_cache_;
  mutable PlanningGate planning_gate_;
  std::thread loop_;
};

// "job/attempt": the attempt's scope in the rendezvous store.
std::string RendezvousKey(const std::string& job_id, int32_t attempt);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_COORDINATOR_COORDINATOR_H_
