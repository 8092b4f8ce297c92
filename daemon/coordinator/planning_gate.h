// How many memory plans each user may have plateaud make at once. A plan of
// the largest spec the rules accept takes seconds of a core (docs/
// BENCHMARKS.md, "The memory planner"), and a user may ask for many at once
// (PlanJob, or SubmitJob, which plans at admission): with a turn each, one
// user's plans take at most `plans_per_user` cores, and every other user's
// plans go on beside them. A plan waits for its user's turn; other users
// never wait on it.
//
// Thread-safe.
#ifndef PLATEAU_DAEMON_COORDINATOR_PLANNING_GATE_H_
#define PLATEAU_DAEMON_COORDINATOR_PLANNING_GATE_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace plateau::daemon {

class PlanningGate {
 public:
  // REQUIRES: plans_per_user >= 1.
  explicit PlanningGate(int plans_per_user);

  // A user's turn to plan, held until it is destroyed.
  class Turn {
   public:
    Turn(Turn&& other) noexcept;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    Turn& operator=(Turn&&) = delete;
    ~Turn();

   private:
    friend class PlanningGate;
    Turn(PlanningGate* gate, std::string user);
    PlanningGate* gate_;
    std::string user_;
  };

  // Blocks until `user` has fewer than plans_per_user turns, then takes one.
  Turn Enter(const std::string& user);
  // Turns held now by `user`.
  int Held(const std::string& user) const;

 private:
  void Leave(const std::string& user);

  const int plans_per_user_;
  mutable absl::Mutex mutex_;
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_COORDINATOR_PLANNING_GATE_H_
