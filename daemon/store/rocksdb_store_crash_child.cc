// The child of the crash test: opens a RocksDbStore in DIRECTORY and writes
// the synced batches FIRST, FIRST+1, ... (crash_batch.h) until killed. After
// each acknowledged Write it writes the batch number to stdout as 8 native
// bytes (atomic on a pipe). Exits 1 on any store error.
//
// Usage: rocksdb_store_crash_child DIRECTORY FIRST PADDING_BYTES
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "daemon/store/crash_batch.h"
#include "daemon/store/rocksdb_store.h"

namespace plateau::daemon {
namespace {

int Run(int argc, char** argv) {
  int64_t first = 0;
  int padding_bytes = 0;
  if (argc != 4 || !absl::SimpleAtoi(argv[2], &first) ||
      !absl::SimpleAtoi(argv[3], &padding_bytes)) {
    std::fprintf(stderr, "usage: %s DIRECTORY FIRST PADDING_BYTES\n", argv[0]);
    return 2;
  }
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  WriteOptions synced;
  synced.sync = true;
  for (int64_t number = first;; ++number) {
    absl::Status status =
        (*store)->Write(MakeCrashBatch(number, padding_bytes), synced);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    // A dead parent ends this with EPIPE (or SIGPIPE).
    if (::write(STDOUT_FILENO, &number, sizeof(number)) != sizeof(number)) {
      return 1;
    }
  }
}

}  // namespace
}  // namespace plateau::daemon

int main(int argc, char** argv) { return plateau::daemon::Run(argc, argv); }
