#include "daemon/scheduler/fair_share.h"

#include <cmath>
#include <utility>

namespace plateau::daemon {

FairShare::FairShare(std::map<std::string, double> shares, double default_share,
                     absl::Duration half_life)
    : shares_(std::move(shares)),
      default_share_(default_share),
      half_life_(half_life) {}

void FairShare::Advance(absl::Time now,
                        const std::map<std::string, int64_t>& devices_by_user) {
  if (last_ == absl::InfinitePast() || now <= last_) {
    if (last_ == absl::InfinitePast()) last_ = now;
    return;
  }
  const double seconds = absl::ToDoubleSeconds(now - last_);
  const double half_life = absl::ToDoubleSeconds(half_life_);
  const double decay = std::exp2(-seconds / half_life);
  for (auto& [user, use] : use_) use *= decay;
  // d devices held over `seconds`, each second decayed to now:
  // d * integral_0^seconds 2^(-s / half_life) ds.
  const double held_seconds = half_life / std::log(2.0) * (1.0 - decay);
  for (const auto& [user, devices] : devices_by_user) {
    use_[user] += static_cast<double>(devices) * held_seconds;
  }
  last_ = now;
}

void FairShare::Restore(absl::Time time, std::map<std::string, double> use) {
  last_ = time;
  use_ = std::move(use);
}

double FairShare::Use(const std::string& user) const {
  const auto found = use_.find(user);
  return found == use_.end() ? 0.0 : found->second;
}

double FairShare::ShareOf(const std::string& user) const {
  const auto found = shares_.find(user);
  return found == shares_.end() ? default_share_ : found->second;
}

double FairShare::UsePerShare(const std::string& user) const {
  return Use(user) / ShareOf(user);
}

}  // namespace plateau::daemon
