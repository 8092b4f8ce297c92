// MemoryStore: the in-memory Store for tests, with the same contract as
// RocksDbStore except durability (nothing survives the object; `sync` is
// ignored). Thread-safe.
#ifndef PLATEAU_DAEMON_STORE_MEMORY_STORE_H_
#define PLATEAU_DAEMON_STORE_MEMORY_STORE_H_

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/store.h"

namespace plateau::daemon {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  absl::Status Write(const WriteBatch& batch,
                     const WriteOptions& options) override;
  absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) override;
  // Copies the matching range under the lock, then visits the copy without
  // it, so `visit` may call back into the store.
  absl::Status Scan(
      absl::string_view prefix,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) override;
  absl::Status ScanAfter(
      absl::string_view prefix, absl::string_view start_after,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) override;

 private:
  // Scan from the first key after `start_after` (from the prefix if unset).
  absl::Status ScanFrom(
      absl::string_view prefix, std::optional<absl::string_view> start_after,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit);

  absl::Mutex mutex_;
  std::map<std::string, std::string, std::less<>> entries_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_STORE_MEMORY_STORE_H_
