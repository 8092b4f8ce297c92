#include "daemon/store/memory_store.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"

namespace plateau::daemon {

absl::Status MemoryStore::Write(const WriteBatch& batch,
                                const WriteOptions& /*options*/) {
  absl::MutexLock lock(&mutex_);
  for (const WriteBatch::Operation& operation : batch.operations()) {
    if (operation.value.has_value()) {
      entries_.insert_or_assign(operation.key, *operation.value);
    } else {
      entries_.erase(operation.key);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> MemoryStore::Get(
    absl::string_view key) {
  absl::ReaderMutexLock lock(&mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

absl::Status MemoryStore::Scan(
    absl::string_view prefix,
    const std::function<bool(absl::string_view key, absl::string_view value)>&
        visit) {
  return ScanFrom(prefix, std::nullopt, visit);
}

absl::Status MemoryStore::ScanAfter(
    absl::string_view prefix, absl::string_view start_after,
    const std::function<bool(absl::string_view key, absl::string_view value)>&
        visit) {
  return ScanFrom(prefix, start_after, visit);
}

absl::Status MemoryStore::ScanFrom(
    absl::string_view prefix, std::optional<absl::string_view> start_after,
    const std::function<bool(absl::string_view key, absl::string_view value)>&
        visit) {
  // The copy is the snapshot: writes after it are invisible to this scan, and
  // `visit` runs without the lock.
  std::vector<std::pair<std::string, std::string>> snapshot;
  {
    absl::ReaderMutexLock lock(&mutex_);
    auto it = entries_.lower_bound(prefix);
    if (start_after.has_value() && *start_after >= prefix) {
      it = entries_.upper_bound(*start_after);
    }
    for (; it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
      snapshot.emplace_back(it->first, it->second);
    }
  }
  for (const auto& [key, value] : snapshot) {
    if (!visit(key, value)) break;
  }
  return absl::OkStatus();
}

}  // namespace plateau::daemon
