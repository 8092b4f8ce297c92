// The jobs of the cluster: their records, their state machine and their
// history (events and worker log lines), kept in memory and persisted in the
// Store. Every change a caller is told succeeded is durable first (synced
// write) — except progress and worker log lines, which are written without
// sync (a crash may lose the last few, never a state transition).
//
// State machine (DESIGN.md section 3):
//   QUEUED -> SCHEDULED (devices allocated, start commands sent)
//   SCHEDULED -> RUNNING (a rank reported it runs)
//   SCHEDULED | RUNNING -> SUCCEEDED | QUEUED (requeued while restarts
//     remain) | FAILED
//   QUEUED -> CANCELLED;  SCHEDULED | RUNNING -> CANCELLING -> CANCELLED
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
#include <vector>

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
  kFailed,   // a rank failed or a node was lost
  kStopped,  // stopped on request (cancel)
};

struct JobListFilter {
  std::vector<v1::JobState> states;  // empty: all
  std::string owner;                 // empty: all
  int page_size = 100;
  std::string page_token;  // the last job id of the previous page
};

struct JobPage {
  std::vector<v1::Job> jobs;  // newest first
  std::string next_page_token;
};

struct PlacedJob {
  std::string job_id;
  v1::Allocation allocation;
};

class JobManager {
 public:
  // Loads every job from the store.
  static absl::StatusOr<std::unique_ptr<JobManager>> Open(Store* store,
                                                          Clock clock);

  // REQUIRES: spec passed ValidateJobSpec. A repeated idempotency_key of the
  // same owner returns the job it created.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec,
                                 const std::string& spec_yaml,
                                 const std::string& owner,
                                 const std::string& idempotency_key);

  absl::StatusOr<v1::Job> Get(const std::string& job_id) const;
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
  // call, oldest change first; every job on the first call. For a single
  // consumer keeping its own view of the jobs up to date: the coordinator's
  // scheduling view.
  std::vector<std::string> TakeChangedJobIds();

  // QUEUED -> CANCELLED at once; SCHEDULED/RUNNING -> CANCELLING (the caller
  // stops the attempt; EndAttempt then finishes the cancel). Final states:
  // FAILED_PRECONDITION.
  absl::StatusOr<v1::Job> RequestCancel(const std::string& job_id,
                                        const std::string& reason);

  // QUEUED -> SCHEDULED for every placement, in one durable batch; each
  // job's attempt number grows by one. Placements of jobs no longer QUEUED
  // are skipped (and not returned).
  absl::StatusOr<std::vector<v1::Job>> Schedule(
      const std::vector<PlacedJob>& placements);

  // SCHEDULED -> RUNNING. Stale attempts are ignored.
  absl::Status MarkRunning(const std::string& job_id, int32_t attempt);

  // Ends the current attempt; returns the job afterwards. Stale attempts are
  // ignored (returns the job unchanged).
  absl::StatusOr<v1::Job> EndAttempt(const std::string& job_id, int32_t attempt,
                                     AttemptOutcome outcome,
                                     const std::string& error);

  // Without sync; stale attempts are ignored.
  absl::Status RecordProgress(const std::string& job_id, int32_t attempt,
                              const v1::JobProgress& progress);
  absl::Status AppendLogLines(const std::string& job_id,
                              const std::vector<v1::WorkerLogLine>& lines);
  // Synced: a resume must find its checkpoint.
  absl::Status RecordCheckpoint(const std::string& job_id, int32_t attempt,
                                int64_t step, const std::string& location);

  // In memory only: recomputed by every scheduling pass.
  void SetWaitReasons(const std::map<std::string, std::string>& reasons);

  // Log entries (events and worker lines) after `after_sequence`, in order,
  // until visit returns false.
  absl::Status ReadLog(
      const std::string& job_id, int64_t after_sequence,
      const std::function<bool(const v1::LogEntry&)>& visit) const;

  // A counter that grows whenever the job changes (record or log).
  int64_t Version(const std::string& job_id) const;
  // Waits until Version(job_id) > seen or the timeout passes; returns the
  // version then.
  int64_t WaitForChange(const std::string& job_id, int64_t seen,
                        absl::Duration timeout) const;

 private:
  JobManager(Store* store, Clock clock);

  struct Entry {
    v1::Job job;
    int64_t version = 0;
  };

  // Adds an event to *job (sequence, state) and its log entry to *batch.
  void AddEvent(v1::Job* job, v1::JobEventKind kind, const std::string& message,
                WriteBatch* batch) const;
  absl::Status Commit(std::vector<v1::Job> jobs, WriteBatch batch, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(transitions_);
  absl::StatusOr<v1::Job> CopyOf(const std::string& job_id) const;
  // Stores `job` as the record of its id, keeping state_index_ in step.
  void PutLocked(v1::Job job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  Store* const store_;
  const Clock clock_;
  // Held across a transition's read, durable write and apply.
  absl::Mutex transitions_ ABSL_ACQUIRED_BEFORE(mutex_);
  mutable absl::Mutex mutex_;
  mutable absl::CondVar changed_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mutex_);
  // Jobs by state, then id: passes over the queue need not walk every job
  // ever. The pointers are into jobs_ (std::map: they stay valid).
  std::map<v1::JobState, std::map<std::string, const Entry*>> state_index_
      ABSL_GUARDED_BY(mutex_);
  int64_t next_job_number_ ABSL_GUARDED_BY(mutex_) = 1;
  std::vector<std::string> changed_job_ids_ ABSL_GUARDED_BY(mutex_);
  // owner + '\0' + key -> job id, including submissions in flight.
  std::map<std::string, std::string> idempotency_ ABSL_GUARDED_BY(mutex_);
};

// "j-00000042".
std::string JobIdForNumber(int64_t number);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_JOBS_JOB_MANAGER_H_
