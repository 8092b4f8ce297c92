// The batches of the crash test (rocksdb_store_test): batch `number` puts
// three keys under "batch/<number>/" whose values all carry `number`, so a
// recovered store shows whether a batch is whole, torn or missing.
#ifndef PLATEAU_DAEMON_STORE_CRASH_BATCH_H_
#define PLATEAU_DAEMON_STORE_CRASH_BATCH_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/store/store.h"

namespace plateau::daemon {

inline constexpr int kCrashBatchKeys = 3;
inline constexpr char kCrashBatchPrefix[] = "batch/";

// Zero-padded, so key order is batch order.
inline std::string CrashBatchKey(int64_t number, int part) {
  return absl::StrFormat("%s%010d/%d", kCrashBatchPrefix, number, part);
}

// "<number>:" then `padding_bytes` filler bytes that depend on the number.
inline std::string CrashBatchValue(int64_t number, int padding_bytes) {
  return absl::StrCat(number, ":",
                      std::string(padding_bytes, 'a' + number % 26));
}

inline WriteBatch MakeCrashBatch(int64_t number, int padding_bytes) {
  WriteBatch batch;
  for (int part = 0; part < kCrashBatchKeys; ++part) {
    batch.Put(CrashBatchKey(number, part),
              CrashBatchValue(number, padding_bytes));
  }
  return batch;
}

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_STORE_CRASH_BATCH_H_
