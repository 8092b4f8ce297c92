// A job as lists show it (ListJobs, the web page's /jobs): what a row
// needs, and nothing whose size a user sets. The spec's YAML, its plans and
// the per-rank memory are GetJob's; a list of any number of jobs then stays
// small (a summary is under a few KiB whatever was submitted).
#ifndef PLATEAU_DAEMON_JOBS_JOB_SUMMARY_H_
#define PLATEAU_DAEMON_JOBS_JOB_SUMMARY_H_

#include "proto/job.pb.h"

namespace plateau::daemon {

// The job's id, owner, state, attempt, restarts, preemptions, times,
// progress, last error, allocation, wait reason, queue position, log
// counts and precision reason, and of its spec the name, priority,
// resources and steps. Without spec_yaml, the rest of the spec, memory,
// plan, fp32_alternative, finished_nodes, recent_preemption_times,
// attempt_layouts and idempotency_key.
v1::Job JobSummary(const v1::Job& job);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_JOBS_JOB_SUMMARY_H_
