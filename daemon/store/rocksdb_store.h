// RocksDbStore: the production Store, one RocksDB database in one directory
// (see store.h for the contract). Holds no lock of its own: concurrent
// writers meet in RocksDB's write queue, which commits them in groups and
// shares one WAL fsync per group.
//
// Errors carry the directory and RocksDB's message. Codes:
//   DATA_LOSS           corruption (CURRENT, MANIFEST, WAL or table checksums)
//                       or a file the database refers to is missing
//   UNAVAILABLE         I/O errors, including a directory already open in
//                       another RocksDbStore (RocksDB's LOCK file)
//   RESOURCE_EXHAUSTED  disk full, or a write refused by the space guard
//   FAILED_PRECONDITION the path exists and is not a directory
//   errno's code        the directory cannot be created (PERMISSION_DENIED...)
//   INVALID_ARGUMENT, UNIMPLEMENTED, ABORTED, INTERNAL  RocksDB's other codes
//
// Thread-safe.
#ifndef PLATEAU_DAEMON_STORE_ROCKSDB_STORE_H_
#define PLATEAU_DAEMON_STORE_ROCKSDB_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/store/store.h"

namespace rocksdb {
class DB;
class Env;
class FileSystem;
class SstFileManager;
class Statistics;
}  // namespace rocksdb

namespace plateau::daemon {

// The space guard. RocksDB cannot be trusted to meet a full disk: a table
// write that fails there may abort the process (an assertion compiled into
// the distributions' librocksdb). So every Write first checks that the
// directory's file system has room for everything RocksDB may write next: a
// compaction that rewrites the whole store, and `headroom_bytes` for the
// memtables' flushes (at least two memtables). It also keeps the store's
// tables, memtables and the headroom under `max_store_bytes`. Short of
// either, the write is refused (RESOURCE_EXHAUSTED naming the directory, the
// space free and the space needed) before RocksDB sees it; a batch of
// deletes only needs the headroom free, so pruning goes on. Reads are always
// served, and writes succeed again as soon as there is room, without a
// restart. RocksDB's SstFileManager holds its tables to `max_store_bytes`
// too, and starts no compaction that would leave less than `headroom_bytes`
// under it. The WAL, MANIFEST and info logs are not counted: the headroom
// and the files' own bounds (MakeOptions) cover them.
struct RocksDbStoreOptions {
  int64_t headroom_bytes = int64_t{64} << 20;  // 0: no guard (tests)
  int64_t max_store_bytes = 0;  // 0: the file system's free space alone
  // The write buffer: a flush writes a table of at most about this much.
  int64_t memtable_bytes = int64_t{8} << 20;
  // Replaces the real file system (tests inject faults through it).
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // Replaces statvfs's space available to unprivileged users (tests).
  std::function<absl::StatusOr<int64_t>(const std::string& directory)>
      free_bytes;
};

class RocksDbStore : public Store {
 public:
  // Opens the database in `directory`, creating it (and missing parent
  // directories) if absent. Replays the WAL: every write acknowledged before
  // a crash is there, and no batch is torn. A write that fails on a full disk
  // fails alone: the next one asks RocksDB to resume, and the store works
  // again once the disk has room. After an I/O error in the log it stays
  // stopped (UNAVAILABLE, saying to restart plateaud): only a reopen,
  // replaying the log, can be trusted then.
  static absl::StatusOr<std::unique_ptr<RocksDbStore>> Open(
      const std::string& directory, RocksDbStoreOptions options = {});

  // Closes the database; pending unsynced writes are already in the WAL.
  ~RocksDbStore() override;
  RocksDbStore(const RocksDbStore&) = delete;
  RocksDbStore& operator=(const RocksDbStore&) = delete;

  absl::Status Write(const WriteBatch& batch,
                     const WriteOptions& options) override;
  absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) override;
  absl::Status Scan(
      absl::string_view prefix,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) override;
  absl::Status ScanAfter(
      absl::string_view prefix, absl::string_view start_after,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) override;

  // Write-path counters since Open, for metrics and tests. Group commit shows
  // as writes > wal_syncs under concurrent synced writers.
  struct WriteStats {
    int64_t writes = 0;     // Write calls that reached the WAL
    int64_t wal_syncs = 0;  // fsyncs of the WAL
  };
  WriteStats GetWriteStats() const;

  const std::string& directory() const { return directory_; }

  // The store's size as the guard counts it: its tables, and the most its
  // two memtables hold (their contents sit in its log until flushed).
  int64_t StoreBytes() const;

 private:
  // OK when the space guard lets a write through (see RocksDbStoreOptions);
  // a batch of deletes only needs the headroom.
  absl::Status CheckSpace(bool deletes_only) const;

  // Scan from the first key after `start_after` (from the prefix if unset).
  absl::Status ScanFrom(
      absl::string_view prefix, std::optional<absl::string_view> start_after,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit);

  RocksDbStore(std::string directory, RocksDbStoreOptions options,
               std::unique_ptr<rocksdb::Env> env,
               std::unique_ptr<rocksdb::DB> db,
               std::shared_ptr<rocksdb::Statistics> statistics,
               std::shared_ptr<rocksdb::SstFileManager> sst_file_manager);

  const std::string directory_;
  const RocksDbStoreOptions options_;
  const std::shared_ptr<rocksdb::Statistics> statistics_;
  const std::shared_ptr<rocksdb::SstFileManager> sst_file_manager_;
  const std::unique_ptr<rocksdb::Env> env_;  // null: the default; outlives db_
  const std::unique_ptr<rocksdb::DB> db_;
  // Set by a failed write: the next one resumes RocksDB first.
  std::atomic<bool> write_failed_{false};
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_STORE_ROCKSDB_STORE_H_
