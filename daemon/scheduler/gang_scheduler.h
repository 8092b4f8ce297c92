// The gang scheduler's decision function: given the cluster's free devices,
// the running jobs and the waiting jobs, which waiting jobs start now, on
// which devices, and why each of the others waits. Pure (no clocks, no I/O,
// no state between calls), so every rule is unit-testable and a pass over
// 10,000 waiting jobs and 1,000 nodes takes a few milliseconds.
//
// Rules, applied to the waiting jobs one at a time in order:
// - Order: priority (higher first), then the owner's use per share (lower
//   first: fair share, fair_share.h), then submit time (earlier first),
//   then submission order, then job id. The input's order never matters.
// - Never fits: a job needs `nodes` schedulable nodes whose total_devices is
//   >= devices_per_node (a job with nodes or devices_per_node < 1 never
//   fits either). Otherwise it waits with kNeverFits and blocks nobody.
// - Device memory: a job with min_device_memory_bytes > 0 (the memory its
//   plan needs on each device) only runs on nodes whose device_memory_bytes
//   is at least that; every rule here counts only those nodes for it. A job
//   no such node could ever host waits with kNeverFits.
// - Quota: a user's devices in use are their running jobs' devices (on any
//   node, schedulable or not) plus the jobs started in this pass. A job that
//   would take its user above the quota waits with kQuota; it never becomes
//   the reservation head and blocks nobody.
// - Gang: a job starts only with all of its devices at once:
//   devices_per_node devices on each of `nodes` distinct nodes, the lowest
//   free device indices of each node. Devices taken in this pass are no
//   longer free for later jobs of the pass; a node's other free devices are.
// - Packing (best fit): the chosen nodes are those with the fewest free
//   devices that are still enough, ties by node name, so large jobs keep
//   finding whole nodes.
// - Reservation (EASY backfill): the first job that is neither never-fits
//   nor quota-blocked and does not fit the free devices becomes the head
//   (kResources). Its reserved start ("shadow time") is found by releasing
//   the devices of the running jobs, and of the jobs started earlier in this
//   pass (ending at now + time_limit), in order of end time (ties by job id;
//   a stopping job's end is now) until it fits: the end time of the job that
//   made it fit, but never earlier than `now` (overdue jobs free their devices
//   "any moment now"). If it only fits once a job without an end time has
//   ended, the reserved start is unknown.
// - Backfill: a job behind the head starts now only if it fits the free
//   devices (best fit placement), has a time limit, and either
//   (a) ends by the reserved start (now + time_limit <= reserved start), or
//   (b) the head still fits at the reserved start (when unknown: once every
//       running job and every job started before the head has ended) with
//       this job's devices and those of the earlier (b)-backfilled jobs
//       taken, and, when it belongs to the head's user with a quota, that
//       user's devices in use now plus this job plus the head fit the quota.
//   Hence backfill never moves the reserved start later (EASY's guarantee,
//   given that jobs end by their time limits): the head can start at the
//   reserved start at the latest; when that is unknown, once every job now
//   running has ended. Other jobs behind the head wait with kBehindJob.
//   Without a head every job that fits starts.
// - Preemption (preemption_priority_gap > 0): when the head could start
//   with the devices of running jobs at least the gap below it in priority,
//   it preempts them instead of waiting. Its devices coming free are first
//   those of the jobs already stopping (never victims again); if those are
//   not enough, victims are added from the candidates (running, not
//   stopping, priority <= head's - gap, preemptible_from <= now) in order
//   of priority (lowest first), then start time (latest first: the least
//   progress lost), then job id, until the head would fit; then each
//   victim, last added first, is dropped again if the head still fits
//   without it, so no victim is needed in vain. A victim frees all of its
//   devices (a gang is never split); those on nodes that are not
//   schedulable free nothing the head can use. If even every candidate
//   would not make it fit, nothing is preempted. When it preempts, or the
//   stopping jobs are enough, its reservation starts now (they end "any
//   moment now"), so the rules above keep backfill off the devices it waits
//   for.
// - Elastic: a job with fewer_nodes may run at any of its sizes (`nodes`,
//   then fewer_nodes). The rules above drop the sizes that never fit or
//   exceed the quota (never fits, or quota-blocked, only when all do); it
//   starts now at the largest size that fits the free devices (behind a
//   head: that fits and backfills). As the head it reserves its largest
//   remaining size; where it preempts, it reserves and preempts for the
//   smallest size that preemption can make fit, so that no victim stops in
//   vain once a smaller size fits and it starts there.
// Messages: the head's says what it waits for ("waiting for 16 devices on 2
// nodes; 10 free (1 node with 8); reserved to start in 12m"); jobs behind it
// get "behind job J (reserved to start in 12m)" or "(start time unknown:
// waits on jobs without a time limit)", plus why a job that fits now does not
// backfill ("; needs a time limit to backfill", "; starting now would delay
// it"). A head that preempts says whom ("preempting job J (priority 10)
// for 8 devices on 1 node; starts once it has checkpointed and stopped"),
// one that waits on stopping jobs only says so ("waiting for 8 devices on 1
// node; 0 free, 8 coming free from stopping job J").
//
// REQUIRES: distinct node names; distinct job ids; each node's
// free_device_indices ascending, distinct, within [0, total_devices) and
// disjoint from the running jobs' devices. A quota <= 0 means unlimited.
#ifndef PLATEAU_DAEMON_SCHEDULER_GANG_SCHEDULER_H_
#define PLATEAU_DAEMON_SCHEDULER_GANG_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace plateau::daemon {

// A node that can take work (READY, not draining or lost).
struct SchedulableNode {
  std::string name;
  int total_devices = 0;
  std::vector<int> free_device_indices;  // ascending
  // Each device's memory (the smallest of the node's devices'); 0: unknown,
  // which hosts only jobs without a memory need.
  int64_t device_memory_bytes = 0;
};

struct NodeDevices {
  std::string node;
  std::vector<int> device_indices;  // ascending
};

struct RunningJob {
  std::string job_id;
  std::string owner;
  std::vector<NodeDevices> allocation;
  // start + time_limit; unset when the job has no time limit.
  std::optional<absl::Time> expected_end;
  int priority = 0;
  // When its current attempt was placed: the later, the less progress a
  // preemption costs it. InfinitePast: unknown, spared first among equals.
  absl::Time start_time = absl::InfinitePast();
  // Its ranks are being stopped (cancelled, or preempted already): its
  // devices come free any moment now, and it is never chosen as a victim.
  bool stopping = false;
  // It may be preempted only from this time on (plateaud's limit on
  // preemptions per job per hour); InfinitePast: any time.
  absl::Time preemptible_from = absl::InfinitePast();
};

struct WaitingJob {
  std::string job_id;
  std::string owner;
  int priority = 0;
  absl::Time submit_time;
  // Its place in submission order (JobManager::SubmissionOrder): the
  // tie-break among equal submit times, since ids are random.
  int64_t submission_order = 0;
  int nodes = 1;
  int devices_per_node = 1;
  // Unset: runs until done, and so never backfills.
  std::optional<absl::Duration> time_limit;
  // The memory each of its devices must have (from its memory plan); 0: any.
  int64_t min_device_memory_bytes = 0;
  // Elastic (resources.min_nodes): the smaller node counts it may also run
  // on, most first, each below `nodes`, and the memory each device must
  // have for them (the plan at the fewest nodes, where a rank holds the
  // most).
  std::vector<int> fewer_nodes;
  int64_t fewer_nodes_device_memory_bytes = 0;
  // Its owner's FairShare::UsePerShare; equal for all without fair share.
  double use_per_share = 0.0;
};

struct SchedulerInput {
  absl::Time now;
  std::vector<SchedulableNode> nodes;  // any order
  std::vector<RunningJob> running;     // any order
  std::vector<WaitingJob> waiting;     // any order
  // Max devices in use per user; users not listed get default_quota_devices
  // (0 = unlimited).
  std::map<std::string, int> quota_devices;
  int default_quota_devices = 0;
  // A waiting job may preempt running jobs whose priority is at least this
  // much lower; 0 turns preemption off.
  int preemption_priority_gap = 0;
  // Fill SchedulerDecision::waiting. Explaining every waiting job of a long
  // queue costs more than deciding; callers that show reasons only now and
  // then turn it off in between.
  bool explain_waiting = true;
};

struct Placement {
  std::string job_id;
  std::vector<NodeDevices> allocation;  // `nodes` entries, by node name
};

// Why a job waits, for `plateau describe` and ListJobs.
enum class WaitKind {
  kQuota,      // its user is at quota
  kNeverFits,  // more nodes, devices per node or device memory than the
               // cluster has
  kResources,  // the reserved head job: waiting for devices to free up
  kBehindJob,  // behind the reservation of `blocking_job`
};

struct WaitReason {
  WaitKind kind = WaitKind::kResources;
  std::string blocking_job;  // kBehindJob
  // Human-readable, e.g. "behind job j-2k9q4m7x1v8d6 (reserved to start in
  // 12m)".
  std::string message;
  // Its place among the jobs not started, in the order the pass considered
  // them (1: the first).
  int position = 0;
};

// A running job to stop so that a waiting one can start.
struct Preemption {
  std::string victim_job_id;
  std::string preemptor_job_id;
  // For both jobs' histories, e.g. "job j-9v2k7m4q3x1d5 (priority 1000, user
  // bob) needs 8 devices on 1 node; 0 free; job j-3d8v1k6m9q2x7 has priority
  // 10".
  std::string reason;
};

struct SchedulerDecision {
  std::vector<Placement> starts;  // in start order
  // Victims chosen in this pass (never any already stopping), by victim id.
  std::vector<Preemption> preemptions;
  std::map<std::string, WaitReason> waiting;  // every job not started
  // The head job's reservation, if one was made.
  std::optional<std::string> reserved_job;
  std::optional<absl::Time> reserved_start;  // unset: no end time is known
};

SchedulerDecision Schedule(const SchedulerInput& input);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SCHEDULER_GANG_SCHEDULER_H_
