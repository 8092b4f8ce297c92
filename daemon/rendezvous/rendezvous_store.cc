#include "daemon/rendezvous/rendezvous_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace plateau::daemon {
namespace {

// How often a waiter checks whether its caller went away.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(100);

absl::Status NoScope(const std::string& scope) {
  return absl::NotFoundError(
      absl::StrCat("no live attempt with rendezvous key '", scope, "'"));
}

}  // namespace

void RendezvousStore::OpenScope(const std::string& scope) {
  absl::MutexLock lock(&mutex_);
  scopes_[scope];
}

void RendezvousStore::DropScope(const std::string& scope) {
  absl::MutexLock lock(&mutex_);
  scopes_.erase(scope);
  changed_.SignalAll();
}

absl::Status RendezvousStore::Set(const std::string& scope,
                                  const std::string& key,
                                  const std::string& value) {
  absl::MutexLock lock(&mutex_);
  auto found = scopes_.find(scope);
  if (found == scopes_.end()) return NoScope(scope);
  found->second[key] = value;
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::Get(const std::string& scope,
                                                 const std::string& key) const {
  absl::MutexLock lock(&mutex_);
  auto found = scopes_.find(scope);
  if (found == scopes_.end()) return NoScope(scope);
  auto value = found->second.find(key);
  if (value == found->second.end()) {
    return absl::NotFoundError(
        absl::StrCat("rendezvous key '", key, "' is not set"));
  }
  return value->second;
}

absl::Status RendezvousStore::Wait(
    const std::string& scope, const std::vector<std::string>& keys,
    absl::Duration timeout, const std::function<bool()>& cancelled) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mutex_);
  while (true) {
    if (shut_down_) {
      return absl::UnavailableError("plateaud is shutting down");
    }
    auto found = scopes_.find(scope);
    if (found == scopes_.end()) return NoScope(scope);
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (!found->second.count(key)) missing.push_back(key);
    }
    if (missing.empty()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous keys not set within ", absl::FormatDuration(timeout),
          ": ", absl::StrJoin(missing, ", ")));
    }
    if (cancelled != nullptr) {
      // Checked without the lock: it may be slow or take locks of its own.
      mutex_.Unlock();
      const bool gone = cancelled();
      mutex_.Lock();
      if (gone) return absl::CancelledError("the caller went away");
      changed_.WaitWithDeadline(&mutex_, std::min(deadline, now + kCancelPoll));
    } else {
      changed_.WaitWithDeadline(&mutex_, deadline);
    }
  }
}

void RendezvousStore::Shutdown() {
  absl::MutexLock lock(&mutex_);
  shut_down_ = true;
  changed_.SignalAll();
}

}  // namespace plateau::daemon
