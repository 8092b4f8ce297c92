// The lease on which an attempt's ranks run (docs/ARCHITECTURE.md section 3).
//
// Once plateaud has not heard from a node for its node timeout it requeues
// the node's jobs elsewhere; ranks that went on training would then run
// beside the new attempt. So no rank outlives its agent's contact with
// plateaud by more than the lease plateaud grants (AttachAccepted.rank_lease,
// a quarter or more under its node timeout): each acknowledged heartbeat
// extends the lease to that heartbeat's send time + rank_lease, the agent
// writes the expiry into every running attempt's directory, and each rank
// watches the file and ends itself once the expiry has passed. That holds
// whether the agent was cut off (it stops extending) or frozen (it stops
// writing at all).
//
// The file holds "expires_monotonic_ns N\n" on CLOCK_MONOTONIC, which the
// agent and its ranks share (one machine) and no wall-clock step moves. It
// is replaced whole (write beside, rename), not synced: only live processes
// read it.
#ifndef PLATEAU_WORKER_AGENT_RANK_LEASE_H_
#define PLATEAU_WORKER_AGENT_RANK_LEASE_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace plateau::worker {

// "<attempt directory>/lease".
std::string RankLeasePath(const std::string& directory);

// A rank's exit status when it ended itself on an expired lease
// (EX_TEMPFAIL: the attempt is stale, not broken).
inline constexpr int kLeaseExpiredExitCode = 75;

// CLOCK_MONOTONIC's reading.
absl::Duration MonotonicNow();

absl::Status WriteRankLease(const std::string& path, absl::Duration expiry);
// NOT_FOUND when there is no file; DATA_LOSS when it does not parse.
absl::StatusOr<absl::Duration> ReadRankLease(const std::string& path);

// The rank side: a thread that reads the lease every poll_interval and calls
// on_expired once, from that thread, when the expiry has passed or the file
// cannot be read (a rank whose lease is gone is not covered by one). The
// thread is stopped and joined on destruction.
class RankLeaseWatchdog {
 public:
  using ExpiredCallback = std::function<void(const std::string& why)>;
  RankLeaseWatchdog(std::string path, absl::Duration poll_interval,
                    ExpiredCallback on_expired);
  ~RankLeaseWatchdog();

 private:
  void Watch();

  const std::string path_;
  const absl::Duration poll_interval_;
  const ExpiredCallback on_expired_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_RANK_LEASE_H_
