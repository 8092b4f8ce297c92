// The two server streams the CLI follows: WatchJob (a job's changes until it
// ends) and StreamLogs (its events and worker lines). A stream that breaks
// with UNAVAILABLE after it has delivered something is reopened, a second
// apart, up to kMaxReconnects times in a row (plateaud may restart at any
// moment); a first call that fails returns the error at once.
#ifndef PLATEAU_CLIENT_STREAMS_H_
#define PLATEAU_CLIENT_STREAMS_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/connection.h"
#include "client/progress_printer.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace plateau::client {

inline constexpr int kMaxReconnects = 30;
inline constexpr absl::Duration kReconnectDelay = absl::Seconds(1);

// Feeds every WatchJob message to `printer` (the event, if any, then the
// job) until the job reaches a final state, and returns that job; does not
// call printer.Finish. CANCELLED once `canceller` (optional) cancels.
absl::StatusOr<v1::Job> FollowJob(Connection& connection,
                                  const std::string& job_id,
                                  ProgressPrinter& printer,
                                  CallCanceller* canceller = nullptr);

// Calls `on_entry` for each log entry of the job in order; with `follow`,
// until the job has ended (a reopened stream resumes after the last entry
// seen). Errors name the job (NOT_FOUND: "no job <id>").
absl::Status StreamLogEntries(
    Connection& connection, const std::string& job_id, bool follow,
    const std::function<void(const v1::LogEntry&)>& on_entry);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_STREAMS_H_
