// The run directory's fencing token: which attempt of a plateaud job may
// change its checkpoints (docs/ARCHITECTURE.md section 8).
//
// <run_dir>/FENCE holds "attempt N\n", the newest attempt that claimed the
// directory. An attempt's rank 0 claims it before it looks for checkpoints;
// every commit and every deletion under checkpoints/ then happens with
// <run_dir>/FENCE.lock locked (an fcntl lock of the open file description,
// which NFS honours too) and only while FENCE still names the writer's own
// attempt. So once attempt N+1 has claimed the directory, attempt N can
// neither commit a checkpoint nor delete one, whether or not it has noticed
// that it was replaced: a plateaud that lost touch with a node requeues its
// job, and the old ranks may still be running.
//
// Attempt 0 is a run outside plateaud (`plateau-worker train` by hand): it
// writes no FENCE, and is refused a directory that an attempt has claimed.
#ifndef PLATEAU_ENGINE_CHECKPOINT_RUN_FENCE_H_
#define PLATEAU_ENGINE_CHECKPOINT_RUN_FENCE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace plateau::engine {

inline constexpr char kFenceFileName[] = "FENCE";
inline constexpr char kFenceLockFileName[] = "FENCE.lock";

class RunFence {
 public:
  // Claims run_dir (created if missing) for `attempt`: FENCE is raised to
  // it. FAILED_PRECONDITION, naming both attempts, when a newer attempt has
  // claimed it (this one is stale); DATA_LOSS for a FENCE that does not
  // parse; UNAVAILABLE when the lock stays held for lock_timeout.
  static absl::StatusOr<RunFence> Claim(
      const std::string& run_dir, int64_t attempt,
      absl::Duration lock_timeout = absl::Seconds(60));

  // Runs `change` (a commit, a deletion) with the lock held, if FENCE still
  // names this attempt (for attempt 0: if there is no FENCE). Else
  // FAILED_PRECONDITION naming the attempt that owns the directory, and
  // `change` does not run. Otherwise returns what `change` returns.
  absl::Status Guard(const std::function<absl::Status()>& change) const;

  const std::string& run_dir() const { return run_dir_; }
  int64_t attempt() const { return attempt_; }

 private:
  RunFence(std::string run_dir, int64_t attempt, absl::Duration lock_timeout)
      : run_dir_(std::move(run_dir)),
        attempt_(attempt),
        lock_timeout_(lock_timeout) {}

  std::string run_dir_;
  int64_t attempt_ = 0;
  absl::Duration lock_timeout_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_CHECKPOINT_RUN_FENCE_H_
