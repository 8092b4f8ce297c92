#include "daemon/store/store.h"

#include <string>

namespace plateau::daemon {

void WriteBatch::Put(absl::string_view key, absl::string_view value) {
  operations_.push_back(Operation{std::string(key), std::string(value)});
}

void WriteBatch::Delete(absl::string_view key) {
  operations_.push_back(Operation{std::string(key), std::nullopt});
}

}  // namespace plateau::daemon
