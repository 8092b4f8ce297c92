#include "daemon/coordinator/planning_gate.h"

#include <utility>

namespace plateau::daemon {

PlanningGate::PlanningGate(int plans_per_user)
    : plans_per_user_(plans_per_user) {}

PlanningGate::Turn::Turn(PlanningGate* gate, std::string user)
    : gate_(gate), user_(std::move(user)) {}

PlanningGate::Turn::Turn(Turn&& other) noexcept
    : gate_(std::exchange(other.gate_, nullptr)),
      user_(std::move(other.user_)) {}

PlanningGate::Turn::~Turn() {
  if (gate_ != nullptr) gate_->Leave(user_);
}

PlanningGate::Turn PlanningGate::Enter(const std::string& user) {
  absl::MutexLock lock(&mutex_);
  const auto has_room = [this, &user] {
    const auto found = held_.find(user);
    return found == held_.end() || found->second < plans_per_user_;
  };
  mutex_.Await(absl::Condition(&has_room));
  ++held_[user];
  return Turn(this, user);
}

int PlanningGate::Held(const std::string& user) const {
  absl::MutexLock lock(&mutex_);
  const auto found = held_.find(user);
  return found == held_.end() ? 0 : found->second;
}

void PlanningGate::Leave(const std::string& user) {
  absl::MutexLock lock(&mutex_);
  const auto found = held_.find(user);
  if (--found->second == 0) held_.erase(found);
}

}  // namespace plateau::daemon
