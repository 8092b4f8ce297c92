// Text plateaud writes about one job may name others: a wait reason
// ("behind job j-2k9q4m7x1v8d6 (reserved to start in 12m)"), a preemption's
// events ("job j-7q3m1x9k4v2d8 (priority 100, user bob) needs 8 devices ...").
// A caller who may not see a named job reads "another user's job" in its
// place, without that job's user: as GetJob answers NOT_FOUND for it,
// nothing says whose it is. Admins see the text as written.
#ifndef PLATEAU_DAEMON_JOBS_JOB_MENTIONS_H_
#define PLATEAU_DAEMON_JOBS_JOB_MENTIONS_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/jobs/job_manager.h"
#include "proto/job.pb.h"

namespace plateau::daemon {

// Whether the caller may see the job of this id; empty: every job (an
// admin), and the text is left as written without being read.
using JobShown = std::function<bool(const std::string& job_id)>;

// The jobs of `jobs` whose owner the caller may see (Principal::CanSeeJobsOf);
// empty for an admin, who sees every owner's.
JobShown JobsShown(const JobManager* jobs, bool admin,
                   std::function<bool(const std::string& owner)> sees_owner);

// `text` with every job `shown` refuses, and the "user NAME" said of it,
// written as another user's job.
std::string HideUnshownJobs(absl::string_view text, const JobShown& shown);

// The job's wait reason and last error, and an event's message, so.
void HideUnshownJobs(const JobShown& shown, v1::Job* job);
void HideUnshownJobs(const JobShown& shown, v1::JobEvent* event);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_JOBS_JOB_MENTIONS_H_
