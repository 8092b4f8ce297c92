// The rendezvous key-value store ranks bootstrap through (the Gloo store,
// the NCCL unique id). Keys live in a scope, one per job attempt, opened when
// the attempt is scheduled and dropped when it ends. In memory only: after a
// plateaud restart, RUNNING attempts (a rank reported running, so every rank
// has bootstrapped) get their scopes back empty, and attempts still
// SCHEDULED, whose ranks may have been mid-bootstrap, are requeued without
// using a restart (Coordinator::Start).
//
// Thread-safe.
#ifndef PLATEAU_DAEMON_RENDEZVOUS_RENDEZVOUS_STORE_H_
#define PLATEAU_DAEMON_RENDEZVOUS_RENDEZVOUS_STORE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace plateau::daemon {

class RendezvousStore {
 public:
  void OpenScope(const std::string& scope);
  // Drops the scope's keys and wakes its waiters (they get NOT_FOUND).
  void DropScope(const std::string& scope);

  // NOT_FOUND for a scope that is not open.
  absl::Status Set(const std::string& scope, const std::string& key,
                   const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& scope,
                                  const std::string& key) const;
  // Returns when every key is set; DEADLINE_EXCEEDED naming the missing keys
  // after `timeout`; NOT_FOUND if the scope is dropped meanwhile; CANCELLED
  // soon after `cancelled` (checked a few times a second, if given) returns
  // true; UNAVAILABLE once the store shuts down.
  absl::Status Wait(const std::string& scope,
                    const std::vector<std::string>& keys,
                    absl::Duration timeout,
                    const std::function<bool()>& cancelled = nullptr) const;

  // Wakes every waiter (UNAVAILABLE) and fails later waits at once, so that
  // a daemon shutting down is not held up by ranks waiting on their peers.
  void Shutdown();

 private:
  mutable absl::Mutex mutex_;
  mutable absl::CondVar changed_;
  bool shut_down_ ABSL_GUARDED_BY(mutex_) = false;
  std::map<std::string, std::map<std::string, std::string>> scopes_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_RENDEZVOUS_RENDEZVOUS_STORE_H_
