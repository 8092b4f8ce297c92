// The jobs of the cluster: their records, their state machine and their
// history (events and worker log lines), kept in memory and persisted in the
// Store. Every change a caller is told succeeded is durable first (synced
// write) — except progress and worker log lines, which are written without
// sync (a crash may lose the last few, never a state transition).
//
// Log retention: a job's events are all kept; of its worker log lines, the
// first max_log_lines_per_job (default 100,000) are kept and later ones are
// dropped, with one entry (a line from node "plateaud") noting where. Lines
// are accepted only from the job's live attempt. The log lives as long as
// the job record.
//
// Job limits (JobLimits): a user has at most max_active_jobs_per_user jobs
// that have not ended (a submission beyond is refused), and
// PruneEndedJobs deletes, record, log and samples, each user's ended jobs
// beyond the newest keep_ended_jobs_per_user and those that ended more than
// keep_ended_for ago. So what one user keeps in plateaud is bounded.
//
// State machine (docs/ARCHITECTURE.md section 3):
//   QUEUED -> SCHEDULED (devices allocated, start commands sent)
//   SCHEDULED -> RUNNING (a rank reported it runs)
//   SCHEDULED | RUNNING -> SUCCEEDED | QUEUED (requeued while restarts
//     remain, or without using one when the attempt never started) | FAILED
//   SCHEDULED | RUNNING -> PREEMPTING -> QUEUED (without using a restart;
//     SUCCEEDED if it finished meanwhile, and a failure uses a restart)
//   QUEUED -> CANCELLED;  SCHEDULED | RUNNING | PREEMPTING -> CANCELLING ->
//     CANCELLED
// Every transition appends a JobEvent to the job's log.
//
// Thread-safe. Transitions are serialized among themselves; submissions run
// concurrently (their synced writes are committed together).
#ifndef PLATEAU_DAEMON_JOBS_JOB_MANAGER_H_
#define PLATEAU_DAEMON_JOBS_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace plateau::daemon {

using Clock = std::function<absl::Time()>;

// How an attempt ended, as its workers (or the node registry) report it.
enum class AttemptOutcome {
  kSucceeded,
  kFailed,   // a rank failed or a node was lost: uses a restart
  kStopped,  // stopped on request (cancel, preemption)
  // It never ran: its start command could not be delivered, or plateaud
  // restarted while it was still bootstrapping. Requeued without using a
  // restart (or CANCELLED when cancelling).
  kNotStarted,
};

inline constexpr int64_t kDefaultMaxLogLinesPerJob = 100'000;

struct JobLimits {
  int64_t max_log_lines_per_job = kDefaultMaxLogLinesPerJob;
  int max_active_jobs_per_user = 1000;                   // 0: unlimited
  int keep_ended_jobs_per_user = 1000;                   // 0: all
  absl::Duration keep_ended_for = absl::Hours(24 * 30);  // zero: forever
};

struct JobListFilter {
  std::vector<v1::JobState> states;  // empty: all
  std::string owner;                 // empty: all
  int page_size = 100;
  std::string page_token;  // next_page_token of the previous page: opaque
  // Rows are JobSummary's (job_summary.h), not whole jobs.
  bool summaries = false;
  // A page ends before its rows' serialized bytes would pass this (it
  // holds one row at least); 0: pages are bounded by page_size alone.
  int64_t max_page_bytes = 0;
};

struct JobPage {
  std::vector<v1::Job> jobs;  // newest first
  std::string next_page_token;
};

struct PlacedJob {
  PlacedJob() = default;
  PlacedJob(std::string job_id, v1::Allocation allocation)
      : job_id(std::move(job_id)), allocation(std::move(allocation)) {}

  std::string job_id;
  v1::Allocation allocation;
  // For a job whose precision is still auto: what its first attempt runs in
  // (BF16 or FP32; plan/precision_choice.h) and why. Schedule keeps it with
  // the job, taking Job.fp32_alternative for FP32.
  v1::Precision precision = v1::PRECISION_UNSPECIFIED;
  std::string precision_reason;
};

class JobManager {
 public:
  // Loads every job from the store.
  static absl::StatusOr<std::unique_ptr<JobManager>> Open(
      Store* store, Clock clock, const JobLimits& limits = {});

  // REQUIRES: spec passed ValidateJobSpec. A repeated idempotency_key of the
  // same owner returns the job it created. RESOURCE_EXHAUSTED when the
  // owner has max_active_jobs_per_user jobs that have not ended. *created (if
  // given) tells whether this call created the job. `plan` (if given) is kept
  // as Job.plan and summed up in the SUBMITTED event.
  absl::StatusOr<v1::Job> Submit(
      const v1::JobSpec& spec, const std::string& spec_yaml,
      const std::string& owner, const std::string& idempotency_key,
      bool* created = nullptr, const v1::MemoryPlan* plan = nullptr,
      const v1::PlannedSpec* fp32_alternative = nullptr);

  // RESOURCE_EXHAUSTED when `owner` may submit no more jobs now (the cap
  // Submit applies), for a caller about to spend time on a submission.
  absl::Status CheckActiveJobs(const std::string& owner) const;

  // The job that `owner`'s submission with `idempotency_key` created;
  // NOT_FOUND when none has (yet).
  absl::StatusOr<v1::Job> FindSubmitted(
      const std::string& owner, const std::string& idempotency_key) const;

  absl::StatusOr<v1::Job> Get(const std::string& job_id) const;
  // The job's owner, without copying the job; NOT_FOUND for an unknown id.
  absl::StatusOr<std::string> OwnerOf(const std::string& job_id) const;
  absl::StatusOr<JobPage> List(const JobListFilter& filter) const;
  // Jobs in any of `states`, oldest first.
  std::vector<v1::Job> JobsIn(const std::set<v1::JobState>& states) const;
  // Calls visit for each job in any of `states`, oldest first, without
  // copying; visit must not call back into the JobManager.
  void VisitJobsIn(const std::set<v1::JobState>& states,
                   const std::function<void(const v1::Job&)>& visit) const;
  // How many jobs are in each state.
  std::map<v1::JobState, int64_t> CountByState() const;
  // Ids of the jobs created or changed (record, not log) since the previous
  // call, each once, in submission order (deleted ones first); every job on
  // the first call. For a single
  // consumer keeping its own view of the jobs up to date: the coordinator's
  // scheduling view.
  std::vector<std::string> TakeChangedJobIds();
  // Whether `attempt` is the job's current attempt, still live (SCHEDULED,
  // RUNNING, PREEMPTING or CANCELLING), with devices on `node`. Copies
  // nothing.
  bool IsLiveAttemptOn(const std::string& job_id, int32_t attempt,
                       const std::string& node) const;

  // QUEUED -> CANCELLED at once; SCHEDULED/RUNNING/PREEMPTING -> CANCELLING
  // (the caller stops the attempt; EndAttempt then finishes the cancel).
  // Final states: FAILED_PRECONDITION.
  absl::StatusOr<v1::Job> RequestCancel(const std::string& job_id,
                                        const std::string& reason);

  // For a QUEUED job admitted without a plan: records (synced) the plan made
  // once a node that can hold it attached, with the spec and YAML as
  // planned. Anything else (planned meanwhile, cancelled) is left alone;
  // *recorded (if given) tells whether it was recorded.
  absl::StatusOr<v1::Job> RecordPlan(const std::string& job_id,
                                     const v1::JobSpec& spec,
                                     const std::string& spec_yaml,
                                     const v1::MemoryPlan& plan,
                                     const v1::PlannedSpec* fp32_alternative,
                                     bool* recorded = nullptr);
  // QUEUED -> FAILED (synced) with `error`, for a job that turned out not to
  // fit the nodes that can hold it. A job no longer QUEUED is left alone.
  absl::StatusOr<v1::Job> FailQueued(const std::string& job_id,
                                     const std::string& error);

  // SCHEDULED | RUNNING -> PREEMPTING (the caller stops the attempt;
  // EndAttempt then requeues the job without using a restart), with a
  // PREEMPTED event saying `reason` ("attempt 3 preempted: <reason>"), and
  // `now` added to recent_preemption_times (which keeps the last hour's). When
  // `preemptor_id` names a QUEUED job, it gets a PREEMPTING event saying
  // `preemptor_reason`, in the same synced batch. A job in any other state
  // is left alone; *preempted (if given) tells whether it was preempted.
  absl::StatusOr<v1::Job> Preempt(const std::string& job_id,
                                  const std::string& reason,
                                  const std::string& preemptor_id,
                                  const std::string& preemptor_reason,
                                  bool* preempted = nullptr);

  // QUEUED -> SCHEDULED for every placement, in one durable batch; each
  // job's attempt number grows by one and its attempt_start_time is now.
  // Placements of jobs no longer QUEUED are skipped (and not returned).
  absl::StatusOr<std::vector<v1::Job>> Schedule(
      const std::vector<PlacedJob>& placements);

  // SCHEDULED -> RUNNING. Stale attempts are ignored.
  absl::Status MarkRunning(const std::string& job_id, int32_t attempt);

  // Ends the current attempt; returns the job afterwards. Stale attempts
  // (not the current one, or already ended) are ignored: the job comes back
  // unchanged. *ended (if given) tells whether this call ended the attempt.
  absl::StatusOr<v1::Job> EndAttempt(const std::string& job_id, int32_t attempt,
                                     AttemptOutcome outcome,
                                     const std::string& error,
                                     bool* ended = nullptr);

  // Records (synced) that `node` finished its part of the live attempt
  // (Job.finished_nodes); returns the job afterwards. Stale attempts are
  // ignored.
  absl::StatusOr<v1::Job> RecordNodeFinished(const std::string& job_id,
                                             int32_t attempt,
                                             const std::string& node);

  // Records (synced) that `node` re-attached still running the live attempt
  // (after a plateaud restart or a broken stream): an event for the history.
  absl::Status RecordReadopted(const std::string& job_id, int32_t attempt,
                               const std::string& node);
  // Without sync; anything but the live attempt is ignored. Also keeps a
  // ProgressSample of it (with the job's memory as last recorded) when the
  // job's previous sample is old enough (see ProgressSample).
  absl::Status RecordProgress(const std::string& job_id, int32_t attempt,
                              const v1::JobProgress& progress);
  // Without sync; each rank's entry of Job.memory is replaced by its new
  // one. Anything but the live attempt is ignored.
  absl::Status RecordMemory(const std::string& job_id, int32_t attempt,
                            const std::vector<v1::RankMemory>& ranks);
  // Without sync, and without rewriting the job record. Lines of anything
  // but the live attempt `attempt`, and lines beyond the job's cap, are
  // dropped (see the retention above).
  absl::Status AppendLogLines(const std::string& job_id, int32_t attempt,
                              const std::vector<v1::WorkerLogLine>& lines);
  // Synced: a resume must find its checkpoint.
  absl::Status RecordCheckpoint(const std::string& job_id, int32_t attempt,
                                int64_t step, const std::string& location);

  // A waiting job's account: why it waits, and its place in the order.
  struct QueuedJob {
    std::string wait_reason;
    int32_t position = 0;  // 1: the next to start; 0: none
  };
  // Sets every QUEUED job's wait_reason and queue_position (cleared for
  // those not in `queue`). In memory only: recomputed by the scheduling
  // passes.
  void SetQueue(const std::map<std::string, QueuedJob>& queue);

  // The job's progress samples, oldest first.
  absl::StatusOr<std::vector<v1::ProgressSample>> ProgressSamples(
      const std::string& job_id) const;

  // Log entries (events and worker lines) after `after_sequence`, in order,
  // until visit returns false.
  absl::Status ReadLog(
      const std::string& job_id, int64_t after_sequence,
      const std::function<bool(const v1::LogEntry&)>& visit) const;

  // Deletes (record, log, progress samples) the ended jobs beyond each
  // user's keep_ended_jobs_per_user newest, and those that ended more than
  // keep_ended_for ago, oldest first: at most `max_jobs` of them, and no
  // more once a batch holds 50,000 keys. Returns how many it deleted. One
  // caller at a time (the coordinator's passes).
  absl::StatusOr<int> PruneEndedJobs(int max_jobs);

  // The job's place in submission order (larger is newer; 0 for an unknown
  // job): a tie-break for the scheduler, never shown to anyone.
  int64_t SubmissionOrder(const std::string& job_id) const;

  // A counter that grows whenever the job changes (record or log).
  int64_t Version(const std::string& job_id) const;
  // Waits until Version(job_id) > seen or the timeout passes; returns the
  // version then.
  int64_t WaitForChange(const std::string& job_id, int64_t seen,
                        absl::Duration timeout) const;

 private:
  JobManager(Store* store, Clock clock, const JobLimits& limits);

  struct Entry {
    v1::Job job;
    int64_t version = 0;
    int64_t sequence = 0;  // submission order, from 1 (kOrderPrefix)
  };

  // Adds an event to *job (sequence, state) and its log entry to *batch.
  void AddEvent(v1::Job* job, v1::JobEventKind kind, const std::string& message,
                WriteBatch* batch) const;
  absl::Status Commit(std::vector<v1::Job> jobs, WriteBatch batch, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(transitions_);
  absl::StatusOr<v1::Job> CopyOf(const std::string& job_id) const;
  // Stores `job` as the record of its id, keeping the indexes and the
  // per-owner counts in step. REQUIRES: `sequence` for a new id.
  void PutLocked(v1::Job job, int64_t sequence = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status CheckActiveJobsLocked(const std::string& owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Adds `job` to, or takes it from, active_jobs_ or ended_jobs_.
  void CountLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ForgetCountsLocked(const v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Reads the small per-job keys that hold the log's newest sequence number
  // and line count (written with each batch of lines instead of the whole
  // record) into the loaded records.
  absl::Status LoadLogStatesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  Store* const store_;
  const Clock clock_;
  const JobLimits limits_;
  // Held across a transition's read, durable write and apply.
  absl::Mutex transitions_ ABSL_ACQUIRED_BEFORE(mutex_);
  mutable absl::Mutex mutex_;
  mutable absl::CondVar changed_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mutex_);
  // Jobs by state, then submission order: passes over the queue need not
  // walk every job ever. The pointers are into jobs_ (std::map: they stay
  // valid).
  std::map<v1::JobState, std::map<int64_t, const Entry*>> state_index_
      ABSL_GUARDED_BY(mutex_);
  // Every job by submission order, for lists newest first.
  std::map<int64_t, const Entry*> by_sequence_ ABSL_GUARDED_BY(mutex_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mutex_) = 1;
  // Job ids: 64 random bits each.
  absl::BitGen random_ ABSL_GUARDED_BY(mutex_);
  std::set<std::string> changed_job_ids_ ABSL_GUARDED_BY(mutex_);
  // Per job since plateaud started: when its latest progress sample was
  // taken (the next waits until it is old enough), and the validation loss
  // samples last carried (a new one goes into the next sample).
  struct SampleState {
    absl::Time time = absl::InfinitePast();
    double validation_loss = 0.0;
  };
  std::map<std::string, SampleState> sample_states_
      ABSL_GUARDED_BY(transitions_);
  // owner + '\0' + key -> job id, including submissions in flight.
  std::map<std::string, std::string> idempotency_ ABSL_GUARDED_BY(mutex_);
  // Per owner: jobs that have not ended, and submissions in flight.
  std::map<std::string, int> active_jobs_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, int> submitting_jobs_ ABSL_GUARDED_BY(mutex_);
  // Per owner: ended jobs by end time, then id (PruneEndedJobs' order).
  std::map<std::string, std::set<std::pair<absl::Time, std::string>>>
      ended_jobs_ ABSL_GUARDED_BY(mutex_);
};

// "j-" and 13 base-32 digits of the 64 bits ("j-0v3k9q8x2m7a4").
std::string JobIdForBits(uint64_t bits);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_JOBS_JOB_MANAGER_H_
