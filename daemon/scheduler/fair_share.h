// Fair share, in the manner of Slurm's multifactor plugin: each user's use
// of the cluster, in device-seconds decayed with a half-life, against their
// share of it. The gang scheduler considers jobs of equal priority in the
// order of their users' UsePerShare, lowest first, so the user furthest
// below their share goes first and use converges to the shares.
//
// Not thread-safe; the coordinator holds it under its lock, and keeps it
// across restarts with Use()/Restore() (coordinator.h).
#ifndef PLATEAU_DAEMON_SCHEDULER_FAIR_SHARE_H_
#define PLATEAU_DAEMON_SCHEDULER_FAIR_SHARE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/time/time.h"

namespace plateau::daemon {

class FairShare {
 public:
  // shares: user -> share (> 0); users not listed have default_share (> 0).
  // REQUIRES: half_life > 0.
  FairShare(std::map<std::string, double> shares, double default_share,
            absl::Duration half_life);

  // Decays every user's use from the last call to `now`, adding the
  // devices each user held meanwhile (devices_by_user, taken as constant
  // since the last call) as their decayed integral. The first call only
  // sets the clock.
  void Advance(absl::Time now,
               const std::map<std::string, int64_t>& devices_by_user);

  // The user's decayed device-seconds over their share; 0 for a user
  // who has used nothing.
  double UsePerShare(const std::string& user) const;
  // The user's decayed device-seconds.
  double Use(const std::string& user) const;

  // Every user's decayed device-seconds as of `time` (the last Advance),
  // to be restored after a restart; InfinitePast before any Advance.
  absl::Time time() const { return last_; }
  const std::map<std::string, double>& use() const { return use_; }
  // Takes up `use` as of `time` (what time() and use() said before a
  // restart): the next Advance decays it over the time between. Only
  // before the first Advance.
  void Restore(absl::Time time, std::map<std::string, double> use);

 private:
  double ShareOf(const std::string& user) const;

  std::map<std::string, double> shares_;
  double default_share_;
  absl::Duration half_life_;
  std::map<std::string, double> use_;  // decayed device-seconds
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SCHEDULER_FAIR_SHARE_H_
