#include "daemon/store/rocksdb_store.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/sst_file_manager.h"
#include "rocksdb/statistics.h"
#include "rocksdb/status.h"
#include "rocksdb/write_batch.h"

namespace plateau::daemon {
namespace {

rocksdb::Slice ToSlice(absl::string_view bytes) {
  return rocksdb::Slice(bytes.data(), bytes.size());
}

absl::string_view ToStringView(const rocksdb::Slice& bytes) {
  return absl::string_view(bytes.data(), bytes.size());
}

absl::StatusCode ToStatusCode(const rocksdb::Status& status) {
  switch (status.code()) {
    case rocksdb::Status::kOk:
      return absl::StatusCode::kOk;
    case rocksdb::Status::kNotFound:
      return absl::StatusCode::kNotFound;
    case rocksdb::Status::kCorruption:
      return absl::StatusCode::kDataLoss;
    case rocksdb::Status::kNotSupported:
      return absl::StatusCode::kUnimplemented;
    case rocksdb::Status::kInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case rocksdb::Status::kIOError:
      if (status.IsNoSpace()) return absl::StatusCode::kResourceExhausted;
      // A file the database refers to (MANIFEST, table) is gone.
      if (status.IsPathNotFound()) return absl::StatusCode::kDataLoss;
      return absl::StatusCode::kUnavailable;
    case rocksdb::Status::kShutdownInProgress:
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kTimedOut:
      return absl::StatusCode::kUnavailable;
    case rocksdb::Status::kExpired:
      return absl::StatusCode::kDeadlineExceeded;
    case rocksdb::Status::kAborted:
    case rocksdb::Status::kMergeInProgress:
      return absl::StatusCode::kAborted;
    case rocksdb::Status::kCompactionTooLarge:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kInternal;
  }
}

// `status` of the operation `what` on the database in `directory`.
absl::Status FromRocksDb(const rocksdb::Status& status,
                         absl::string_view directory, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(
      ToStatusCode(status),
      absl::StrCat("store ", directory, ": ", what, ": ", status.ToString()));
}

// The smallest key greater than every key starting with `prefix`, or "" when
// there is none (`prefix` empty or all 0xff bytes).
std::string PrefixSuccessor(absl::string_view prefix) {
  std::string successor(prefix);
  while (!successor.empty()) {
    unsigned char& last = reinterpret_cast<unsigned char&>(successor.back());
    if (last != 0xff) {
      ++last;
      return successor;
    }
    successor.pop_back();
  }
  return successor;
}

// Options for a small metadata database (jobs, events, nodes): a few MiB of
// memtable, two background threads, bounded info logs and manifest.
rocksdb::Options MakeOptions(const RocksDbStoreOptions& store_options,
                             std::shared_ptr<rocksdb::Statistics> statistics) {
  rocksdb::Options options;
  options.OptimizeForSmallDb();
  options.IncreaseParallelism(2);
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.write_buffer_size = static_cast<size_t>(store_options.memtable_bytes);
  options.keep_log_file_num = 5;
  options.max_log_file_size = 16 << 20;
  options.max_manifest_file_size = 64 << 20;
  // After a crash, replay the WAL up to the first incomplete record: a synced
  // write precedes it, so every acknowledged batch is kept, and a batch is one
  // record, so none is torn.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Counters only: timers and histograms cost on every write.
  statistics->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);
  options.statistics = std::move(statistics);
  return options;
}

// The bytes of `directory`'s file system that an unprivileged process may
// still write (statvfs's f_bavail: root's reserve does not count).
absl::StatusOr<int64_t> AvailableBytes(const std::string& directory) {
  struct statvfs file_system;
  if (::statvfs(directory.c_str(), &file_system) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("store ", directory, ": measuring free space"));
  }
  return static_cast<int64_t>(file_system.f_bavail) *
         static_cast<int64_t>(file_system.f_frsize);
}

absl::Status CheckOptions(const std::string& directory,
                          const RocksDbStoreOptions& options) {
  if (options.headroom_bytes < 0 || options.max_store_bytes < 0 ||
      options.memtable_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store ", directory,
        ": headroom and size limit must not be negative, and the memtable "
        "must have room"));
  }
  // A flush writes what the memtables hold, and RocksDB keeps two.
  if (options.headroom_bytes > 0 &&
      options.headroom_bytes < 2 * options.memtable_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store ", directory, ": a headroom of ",
                     FormatBytes(options.headroom_bytes),
                     " cannot hold the flush of two memtables of ",
                     FormatBytes(options.memtable_bytes), "; give it at least ",
                     FormatBytes(2 * options.memtable_bytes)));
  }
  if (options.max_store_bytes > 0 &&
      options.max_store_bytes <= options.headroom_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store ", directory, ": a size limit of ",
        FormatBytes(options.max_store_bytes),
        " leaves no room above the headroom of ",
        FormatBytes(options.headroom_bytes), "; raise the limit above it"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(
    const std::string& directory, RocksDbStoreOptions store_options) {
  if (absl::Status valid = CheckOptions(directory, store_options);
      !valid.ok()) {
    return valid;
  }
  if (!store_options.free_bytes) store_options.free_bytes = AvailableBytes;
  // The non-throwing overloads: a path we cannot even stat is an error too.
  std::error_code create_error;
  std::filesystem::create_directories(directory, create_error);
  std::error_code stat_error;
  const std::filesystem::file_status file_status =
      std::filesystem::status(directory, stat_error);
  if (!std::filesystem::is_directory(file_status)) {
    if (std::filesystem::exists(file_status)) {
      return absl::FailedPreconditionError(
          absl::StrCat("store ", directory, ": not a directory"));
    }
    const std::error_code& error = create_error ? create_error : stat_error;
    const std::string what =
        absl::StrCat("store ", directory, ": creating the directory");
    if (!error) return absl::InternalError(absl::StrCat(what, ": vanished"));
    return absl::ErrnoToStatus(error.value(), what);
  }
  std::shared_ptr<rocksdb::Statistics> statistics =
      rocksdb::CreateDBStatistics();
  std::unique_ptr<rocksdb::Env> env;
  rocksdb::Options options = MakeOptions(store_options, statistics);
  if (store_options.file_system != nullptr) {
    env = rocksdb::NewCompositeEnv(store_options.file_system);
    options.env = env.get();
  }
  rocksdb::Status manager_status;
  options.sst_file_manager.reset(rocksdb::NewSstFileManager(
      options.env, options.info_log, /*trash_dir=*/"",
      /*rate_bytes_per_sec=*/0, /*delete_existing_trash=*/true,
      &manager_status));
  if (!manager_status.ok()) {
    return FromRocksDb(manager_status, directory, "tracking its files");
  }
  options.sst_file_manager->SetMaxAllowedSpaceUsage(
      static_cast<uint64_t>(store_options.max_store_bytes));
  options.sst_file_manager->SetCompactionBufferSize(
      static_cast<uint64_t>(store_options.headroom_bytes));
  rocksdb::DB* db = nullptr;
  rocksdb::Status status = rocksdb::DB::Open(options, directory, &db);
  if (!status.ok()) return FromRocksDb(status, directory, "open");
  return std::unique_ptr<RocksDbStore>(
      new RocksDbStore(directory, std::move(store_options), std::move(env),
                       std::unique_ptr<rocksdb::DB>(db), std::move(statistics),
                       options.sst_file_manager));
}

RocksDbStore::RocksDbStore(
    std::string directory, RocksDbStoreOptions options,
    std::unique_ptr<rocksdb::Env> env, std::unique_ptr<rocksdb::DB> db,
    std::shared_ptr<rocksdb::Statistics> statistics,
    std::shared_ptr<rocksdb::SstFileManager> sst_file_manager)
    : directory_(std::move(directory)),
      options_(std::move(options)),
      statistics_(std::move(statistics)),
      sst_file_manager_(std::move(sst_file_manager)),
      env_(std::move(env)),
      db_(std::move(db)) {}

RocksDbStore::~RocksDbStore() {
  // Close() waits for background work; its status has no one to go to.
  db_->Close().PermitUncheckedError();
}

int64_t RocksDbStore::StoreBytes() const {
  // Neither figure takes the database's mutex, which every write needs.
  return static_cast<int64_t>(sst_file_manager_->GetTotalSize()) +
         2 * options_.memtable_bytes;
}

absl::Status RocksDbStore::CheckSpace(bool deletes_only) const {
  if (options_.headroom_bytes == 0) return absl::OkStatus();
  const absl::StatusOr<int64_t> free_bytes = options_.free_bytes(directory_);
  if (!free_bytes.ok()) return free_bytes.status();
  // Deleting (pruning ended jobs) is how the store shrinks: its tombstones
  // need only the flush room.
  const int64_t store_bytes = deletes_only ? 0 : StoreBytes();
  if (*free_bytes < store_bytes + options_.headroom_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "store ", directory_, ": the disk has ", FormatBytes(*free_bytes),
        " free, and plateaud writes only while it has ",
        FormatBytes(store_bytes + options_.headroom_bytes),
        ": the store's size (", FormatBytes(store_bytes),
        ", which a compaction may rewrite) and --store_headroom (",
        FormatBytes(options_.headroom_bytes),
        ", for its memtables' flushes); free space there. Jobs can still be "
        "read"));
  }
  if (!deletes_only && options_.max_store_bytes > 0 &&
      store_bytes + options_.headroom_bytes > options_.max_store_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "store ", directory_, ": holds ", FormatBytes(store_bytes),
        ", and with the ", FormatBytes(options_.headroom_bytes),
        " of --store_headroom that passes its limit of ",
        FormatBytes(options_.max_store_bytes),
        " (--store_max_size); raise the limit (and restart plateaud), or keep "
        "fewer ended jobs (--keep_ended_jobs, --keep_ended_for). Jobs can "
        "still be read"));
  }
  return absl::OkStatus();
}

absl::Status RocksDbStore::Write(const WriteBatch& batch,
                                 const WriteOptions& options) {
  if (batch.empty()) return absl::OkStatus();
  const bool deletes_only =
      std::none_of(batch.operations().begin(), batch.operations().end(),
                   [](const WriteBatch::Operation& operation) {
                     return operation.value.has_value();
                   });
  if (absl::Status space = CheckSpace(deletes_only); !space.ok()) {
    return space;
  }
  rocksdb::WriteBatch rocksdb_batch;
  for (const WriteBatch::Operation& operation : batch.operations()) {
    rocksdb::Status status = operation.value.has_value()
                                 ? rocksdb_batch.Put(ToSlice(operation.key),
                                                     ToSlice(*operation.value))
                                 : rocksdb_batch.Delete(ToSlice(operation.key));
    if (!status.ok()) return FromRocksDb(status, directory_, "write batch");
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = options.sync;
  // A failed WAL write stops RocksDB's writes until it resumes; a full disk
  // that has room again must not keep plateaud from recording jobs.
  // RocksDB may be resuming by itself (it does after a full disk): then
  // this write tries anyway, and fails as UNAVAILABLE until it is done. An
  // I/O error in the WAL is another matter: what the page cache holds can
  // no longer be trusted (a failed fsync may have dropped it), so RocksDB
  // stops for good and only a reopen, replaying the log, recovers.
  if (write_failed_.exchange(false)) {
    if (rocksdb::Status resumed = db_->Resume();
        !resumed.ok() && !resumed.IsBusy()) {
      write_failed_.store(true);
      return FromRocksDb(
          resumed, directory_,
          "stopped after a failed write; restart plateaud to recover from "
          "its log");
    }
  }
  // No lock here: RocksDB groups concurrent writers itself.
  const rocksdb::Status status = db_->Write(write_options, &rocksdb_batch);
  if (!status.ok()) write_failed_.store(true);
  return FromRocksDb(status, directory_, "write");
}

absl::StatusOr<std::optional<std::string>> RocksDbStore::Get(
    absl::string_view key) {
  rocksdb::PinnableSlice value;
  rocksdb::Status status = db_->Get(
      rocksdb::ReadOptions(), db_->DefaultColumnFamily(), ToSlice(key), &value);
  if (status.IsNotFound()) return std::optional<std::string>();
  if (!status.ok()) return FromRocksDb(status, directory_, "get");
  return std::optional<std::string>(value.ToString());
}

absl::Status RocksDbStore::Scan(
    absl::string_view prefix,
    const std::function<bool(absl::string_view key, absl::string_view value)>&
        visit) {
  return ScanFrom(prefix, std::nullopt, visit);
}

absl::Status RocksDbStore::ScanAfter(
    absl::string_view prefix, absl::string_view start_after,
    const std::function<bool(absl::string_view key, absl::string_view value)>&
        visit) {
  return ScanFrom(prefix, start_after, visit);
}

absl::Status RocksDbStore::ScanFrom(
    absl::string_view prefix, std::optional<absl::string_view> start_after,
    const std::function<bool(absl::string_view key, absl::string_view value)>&
        visit) {
  // The iterator reads the implicit snapshot taken when it is created, so the
  // scan is consistent and `visit` may write without disturbing it. Seeking
  // to the prefix with an upper bound at its successor keeps the iterator from
  // reading past the range.
  const std::string upper_bound = PrefixSuccessor(prefix);
  const rocksdb::Slice upper_bound_slice(upper_bound);
  rocksdb::ReadOptions read_options;
  if (!upper_bound.empty()) {
    read_options.iterate_upper_bound = &upper_bound_slice;
  }
  std::unique_ptr<rocksdb::Iterator> iterator(db_->NewIterator(read_options));
  const bool resume = start_after.has_value() && *start_after >= prefix;
  iterator->Seek(ToSlice(resume ? *start_after : prefix));
  // Seek lands on the first key >= its target: skip start_after itself.
  if (resume && iterator->Valid() &&
      ToStringView(iterator->key()) == *start_after) {
    iterator->Next();
  }
  for (; iterator->Valid(); iterator->Next()) {
    const absl::string_view key = ToStringView(iterator->key());
    if (!absl::StartsWith(key, prefix)) break;
    if (!visit(key, ToStringView(iterator->value()))) break;
  }
  return FromRocksDb(iterator->status(), directory_, "scan");
}

RocksDbStore::WriteStats RocksDbStore::GetWriteStats() const {
  WriteStats stats;
  stats.writes = static_cast<int64_t>(
      statistics_->getTickerCount(rocksdb::WRITE_WITH_WAL));
  stats.wal_syncs = static_cast<int64_t>(
      statistics_->getTickerCount(rocksdb::WAL_FILE_SYNCED));
  return stats;
}

}  // namespace plateau::daemon
