// The child of the fault matrix (rocksdb_store_fault_test): opens a
// RocksDbStore in DIRECTORY on a FaultInjectingFileSystem that fails KIND's
// OPERATION with ERROR, from the start (PHASE "open") or once the store is
// open (PHASE "running"), then writes the synced batches FIRST .. FIRST+COUNT-1
// (crash_batch.h) with small memtables, so that tables are flushed and
// compacted and the log rolls over as it goes.
//
// After each acknowledged Write it writes the batch number to stdout as 8
// native bytes. It ends with one line on stderr, "refused: <status>" (exit 3)
// or "wrote all" (exit 0), then "injected: N", and closes the store; an abort
// (in RocksDB, at the fault or at the close) shows as the signal.
//
// Usage: rocksdb_store_fault_child DIRECTORY KIND OPERATION ERROR PHASE FIRST
//        COUNT
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "daemon/store/crash_batch.h"
#include "daemon/store/fault_injecting_file_system.h"
#include "daemon/store/rocksdb_store.h"

namespace plateau::daemon {
namespace {

constexpr int kPaddingBytes = 4096;

int Usage(const char* program, const absl::Status& status) {
  std::fprintf(stderr,
               "%s\nusage: %s DIRECTORY KIND OPERATION ERROR open|running "
               "FIRST COUNT\n",
               status.ToString().c_str(), program);
  return 2;
}

int Run(int argc, char** argv) {
  if (argc != 8) return Usage(argv[0], absl::InvalidArgumentError("7 args"));
  InjectedFault fault;
  absl::StatusOr<StoreFileKind> kind = ParseStoreFileKind(argv[2]);
  absl::StatusOr<FileOperation> operation = ParseFileOperation(argv[3]);
  absl::StatusOr<InjectedError> error = ParseInjectedError(argv[4]);
  for (const absl::Status& status :
       {kind.status(), operation.status(), error.status()}) {
    if (!status.ok()) return Usage(argv[0], status);
  }
  fault = {.kind = *kind, .operation = *operation, .error = *error};
  const std::string phase = argv[5];
  int64_t first = 0;
  int64_t count = 0;
  if ((phase != "open" && phase != "running") ||
      !absl::SimpleAtoi(argv[6], &first) ||
      !absl::SimpleAtoi(argv[7], &count)) {
    return Usage(argv[0], absl::InvalidArgumentError("PHASE FIRST COUNT"));
  }

  auto file_system = std::make_shared<FaultInjectingFileSystem>();
  if (phase == "open") file_system->Set(fault);
  RocksDbStoreOptions options;
  options.memtable_bytes = 64 << 10;
  options.headroom_bytes = 0;  // the faults are the subject, not the guard
  options.file_system = file_system;
  int exit_code = 0;
  {
    absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
        RocksDbStore::Open(argv[1], options);
    if (!store.ok()) {
      std::fprintf(stderr, "refused: %s\ninjected: %lld\n",
                   store.status().ToString().c_str(),
                   static_cast<long long>(file_system->injected()));
      return 3;
    }
    file_system->Set(fault);
    const WriteOptions synced{.sync = true};
    absl::Status status;
    for (int64_t number = first; number < first + count; ++number) {
      status = (*store)->Write(MakeCrashBatch(number, kPaddingBytes), synced);
      if (!status.ok()) break;
      if (::write(STDOUT_FILENO, &number, sizeof(number)) != sizeof(number)) {
        return 1;
      }
    }
    if (status.ok()) {
      std::fprintf(stderr, "wrote all\n");
    } else {
      std::fprintf(stderr, "refused: %s\n", status.ToString().c_str());
      exit_code = 3;
    }
    std::fprintf(stderr, "injected: %lld\n",
                 static_cast<long long>(file_system->injected()));
    std::fflush(stderr);
  }  // closes the store: RocksDB may meet the fault again here
  return exit_code;
}

}  // namespace
}  // namespace plateau::daemon

int main(int argc, char** argv) { return plateau::daemon::Run(argc, argv); }
