// Exit statuses of the plateau CLI (also in its usage text).
#ifndef PLATEAU_CLIENT_EXIT_CODES_H_
#define PLATEAU_CLIENT_EXIT_CODES_H_

#include "proto/job.pb.h"

namespace plateau::client {

inline constexpr int kExitOk = 0;  // also: the followed job SUCCEEDED
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitJobFailed = 3;
inline constexpr int kExitJobCancelled = 4;

// The exit status for a followed job that ended in `state`: 0, 3 or 4;
// kExitError for a state that is not final.
inline int ExitCodeForJob(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    case v1::JOB_STATE_FAILED:
      return kExitJobFailed;
    case v1::JOB_STATE_CANCELLED:
      return kExitJobCancelled;
    default:
      return kExitError;
  }
}

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_EXIT_CODES_H_
