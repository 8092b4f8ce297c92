// plateaud's persistent state: an ordered key-value store with atomic
// batches. Two implementations share one conformance suite: RocksDbStore
// (production, under --data_dir) and MemoryStore (tests).
//
// Durability: Write(batch, {.sync = true}) returns only after the batch is in
// a synced write-ahead log, so anything acknowledged to a client survives a
// SIGKILL or power loss; {.sync = false} (worker log lines, progress) may lose
// the last writes on a crash but never tears a batch. Concurrent synced
// writers are committed together (group commit): throughput grows with
// concurrency even though each writer waits for its fsync.
//
// Thread-safe.
#ifndef PLATEAU_DAEMON_STORE_STORE_H_
#define PLATEAU_DAEMON_STORE_STORE_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace plateau::daemon {

// Puts and deletes applied together or not at all, in order.
class WriteBatch {
 public:
  void Put(absl::string_view key, absl::string_view value);
  void Delete(absl::string_view key);
  bool empty() const { return operations_.empty(); }

  struct Operation {
    std::string key;
    std::optional<std::string> value;  // nullopt: delete
  };
  const std::vector<Operation>& operations() const { return operations_; }

 private:
  std::vector<Operation> operations_;
};

struct WriteOptions {
  bool sync = true;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual absl::Status Write(const WriteBatch& batch,
                             const WriteOptions& options) = 0;

  // nullopt when the key is absent.
  virtual absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) = 0;

  // Calls visit(key, value) for every key starting with `prefix`, in key
  // order, from a consistent snapshot taken when Scan starts, until visit
  // returns false. `visit` may call other methods of this store; its writes
  // are not seen by the scan in progress. The views are valid during the
  // call only.
  virtual absl::Status Scan(
      absl::string_view prefix,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) = 0;

  // Scan, but only the keys that sort after `start_after` (e.g. the last key
  // a previous scan saw): a reader resuming in a long range seeks to it
  // instead of visiting everything before it.
  virtual absl::Status ScanAfter(
      absl::string_view prefix, absl::string_view start_after,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) = 0;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_STORE_STORE_H_
