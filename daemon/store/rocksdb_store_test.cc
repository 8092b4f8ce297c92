// RocksDbStore beyond the conformance suite: durability across reopen and
// SIGKILL, group commit, the space guard, and clean errors for directories
// it cannot open.
#include "daemon/store/rocksdb_store.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/store/batch_writer_child.h"
#include "daemon/store/crash_batch.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

namespace fs = std::filesystem;

std::string MakeTestDirectory() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp",
                   "/rocksdb-store-XXXXXX");
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

WriteOptions Synced(bool sync) {
  WriteOptions options;
  options.sync = sync;
  return options;
}

std::unique_ptr<RocksDbStore> OpenOrDie(const std::string& directory) {
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(directory);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

std::map<std::string, std::string> ScanAll(Store& store,
                                           absl::string_view prefix) {
  std::map<std::string, std::string> entries;
  absl::Status status =
      store.Scan(prefix, [&](absl::string_view key, absl::string_view value) {
        entries.emplace(key, value);
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  return entries;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  ASSERT_TRUE(file.good()) << path;
}

class RocksDbStoreTest : public testing::Test {
 protected:
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }

  const std::string directory_ = MakeTestDirectory();
};

TEST_F(RocksDbStoreTest, ReopenSeesEverythingWritten) {
  const std::string db = directory_ + "/db";
  std::map<std::string, std::string> expected;
  for (int session = 0; session < 3; ++session) {
    std::unique_ptr<RocksDbStore> store = OpenOrDie(db);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(ScanAll(*store, ""), expected) << "session " << session;
    // About 12 MiB per session: more than one memtable, so the reopened
    // store reads both table files and the WAL.
    for (int i = 0; i < 3000; ++i) {
      WriteBatch batch;
      const std::string key = absl::StrFormat("s%d/%05d", session, i);
      const std::string value =
          absl::StrCat(key, std::string(4000, static_cast<char>('a' + i % 26)));
      batch.Put(key, value);
      expected[key] = value;
      if (i % 7 == 0 && i > 0) {
        const std::string old_key = absl::StrFormat("s%d/%05d", session, i - 1);
        batch.Delete(old_key);
        expected.erase(old_key);
      }
      ASSERT_TRUE(store->Write(batch, Synced(i % 2 == 0)).ok());
    }
  }
  std::unique_ptr<RocksDbStore> store = OpenOrDie(db);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ScanAll(*store, ""), expected);
  EXPECT_EQ(store->Get("s1/00012").value(), expected.at("s1/00012"));
  EXPECT_EQ(store->Get("s1/00013").value(), std::nullopt);  // deleted
  EXPECT_EQ(store->Get("s2/02999").value(), expected.at("s2/02999"));
}

TEST_F(RocksDbStoreTest, OpenCreatesMissingParentDirectories) {
  const std::string db = directory_ + "/a/b/c";
  {
    std::unique_ptr<RocksDbStore> store = OpenOrDie(db);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->directory(), db);
    WriteBatch batch;
    batch.Put("k", "v");
    ASSERT_TRUE(store->Write(batch, Synced(true)).ok());
  }
  EXPECT_TRUE(fs::exists(db + "/CURRENT"));
  std::unique_ptr<RocksDbStore> store = OpenOrDie(db);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Get("k").value(), "v");
}

TEST_F(RocksDbStoreTest, OpenOfAFileFailsNamingIt) {
  const std::string file = directory_ + "/file";
  WriteText(file, "not a database");
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(file);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(store.status().message(), file))
      << store.status();

  store = RocksDbStore::Open(file + "/db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition)
      << store.status();  // ENOTDIR
  EXPECT_TRUE(absl::StrContains(store.status().message(), file + "/db"))
      << store.status();
}

TEST_F(RocksDbStoreTest, OpenWithGarbageCurrentFailsWithDataLoss) {
  WriteText(directory_ + "/CURRENT", std::string("\x01\xffgarbage", 9));
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(directory_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss)
      << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), directory_))
      << store.status();
}

TEST_F(RocksDbStoreTest, OpenWithCurrentNamingAMissingManifestIsDataLoss) {
  {
    std::unique_ptr<RocksDbStore> store = OpenOrDie(directory_);
    ASSERT_NE(store, nullptr);
  }
  WriteText(directory_ + "/CURRENT", "MANIFEST-999999\n");
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(directory_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss)
      << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), directory_))
      << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), "MANIFEST-999999"))
      << store.status();
}

TEST_F(RocksDbStoreTest, SecondOpenOfADirectoryFailsUntilTheFirstCloses) {
  std::unique_ptr<RocksDbStore> first = OpenOrDie(directory_);
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<RocksDbStore>> second =
      RocksDbStore::Open(directory_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), directory_))
      << second.status();
  first.reset();
  EXPECT_NE(OpenOrDie(directory_), nullptr);
}

TEST_F(RocksDbStoreTest, UnsyncedWritesDoNotSyncTheWal) {
  std::unique_ptr<RocksDbStore> store = OpenOrDie(directory_);
  ASSERT_NE(store, nullptr);
  const RocksDbStore::WriteStats before = store->GetWriteStats();
  for (int i = 0; i < 100; ++i) {
    WriteBatch batch;
    batch.Put(absl::StrCat("k", i), "v");
    ASSERT_TRUE(store->Write(batch, Synced(false)).ok());
  }
  RocksDbStore::WriteStats after = store->GetWriteStats();
  EXPECT_EQ(after.writes - before.writes, 100);
  EXPECT_EQ(after.wal_syncs, before.wal_syncs);

  WriteBatch batch;
  batch.Put("synced", "v");
  ASSERT_TRUE(store->Write(batch, Synced(true)).ok());
  EXPECT_EQ(store->GetWriteStats().wal_syncs, after.wal_syncs + 1);
}

struct SyncedWriteRate {
  double writes_per_second = 0;
  double writes_per_wal_sync = 0;
};

SyncedWriteRate MeasureSyncedWrites(RocksDbStore& store, int threads,
                                    int batches_per_thread) {
  const RocksDbStore::WriteStats before = store.GetWriteStats();
  std::atomic<int> failures{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> writers;
  for (int thread = 0; thread < threads; ++thread) {
    writers.emplace_back([&, thread] {
      for (int i = 0; i < batches_per_thread; ++i) {
        WriteBatch batch;
        batch.Put(absl::StrFormat("rate/%02d/%02d/%05d", threads, thread, i),
                  std::string(100, 'v'));
        if (!store.Write(batch, Synced(true)).ok()) ++failures;
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(failures, 0);
  const RocksDbStore::WriteStats after = store.GetWriteStats();
  const int64_t writes = after.writes - before.writes;
  const int64_t syncs = after.wal_syncs - before.wal_syncs;
  EXPECT_EQ(writes, int64_t{threads} * batches_per_thread);
  return SyncedWriteRate{writes / seconds,
                         syncs > 0 ? static_cast<double>(writes) / syncs : 0};
}

// Concurrent synced writers must share WAL fsyncs (RocksDB's group commit):
// nothing of ours may serialize them.
TEST_F(RocksDbStoreTest, ConcurrentSyncedWritersShareWalSyncs) {
  std::unique_ptr<RocksDbStore> store = OpenOrDie(directory_);
  ASSERT_NE(store, nullptr);
  const SyncedWriteRate one = MeasureSyncedWrites(*store, 1, 400);
  const SyncedWriteRate sixteen = MeasureSyncedWrites(*store, 16, 100);
  std::printf(
      "synced writes, 1 thread:   %7.0f writes/s, %.2f writes per WAL sync\n"
      "synced writes, 16 threads: %7.0f writes/s, %.2f writes per WAL sync "
      "(%.1fx)\n",
      one.writes_per_second, one.writes_per_wal_sync, sixteen.writes_per_second,
      sixteen.writes_per_wal_sync,
      sixteen.writes_per_second / one.writes_per_second);
  RecordProperty("synced_writes_per_second_1_thread",
                 static_cast<int>(one.writes_per_second));
  RecordProperty("synced_writes_per_second_16_threads",
                 static_cast<int>(sixteen.writes_per_second));
  EXPECT_DOUBLE_EQ(one.writes_per_wal_sync, 1.0);
  EXPECT_GT(sixteen.writes_per_wal_sync, 2.0);
}

// --- The space guard ------------------------------------------------------

// Without room for the store and the headroom a write is refused before
// RocksDB sees it, saying where and how much; reads go on; with room again
// writes succeed, in the same process.
TEST_F(RocksDbStoreTest, WritesWaitForHeadroomWhileReadsGoOn) {
  auto free_bytes = std::make_shared<std::atomic<int64_t>>(int64_t{1} << 30);
  RocksDbStoreOptions options;
  options.headroom_bytes = int64_t{64} << 20;
  options.free_bytes = [free_bytes](const std::string&) {
    return absl::StatusOr<int64_t>(free_bytes->load());
  };
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(directory_, options);
  ASSERT_TRUE(store.ok()) << store.status();
  WriteBatch first;
  first.Put("job/1", "kept");
  ASSERT_TRUE((*store)->Write(first, Synced(true)).ok());

  free_bytes->store(int64_t{10} << 20);
  WriteBatch second;
  second.Put("job/2", "refused");
  for (const bool sync : {true, false}) {
    const absl::Status refused = (*store)->Write(second, Synced(sync));
    EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
    for (const char* part : {directory_.c_str(), "10.00 MiB free", "64.00 MiB",
                             "--store_headroom"}) {
      EXPECT_TRUE(absl::StrContains(refused.message(), part))
          << part << ": " << refused;
    }
  }
  absl::StatusOr<std::optional<std::string>> read = (*store)->Get("job/1");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->value_or(""), "kept");
  EXPECT_EQ(ScanAll(**store, "job/").size(), 1u);

  // With the headroom free but not the store's size beside it, deletes
  // (pruning) still pass: they are how the store shrinks.
  free_bytes->store(int64_t{70} << 20);
  EXPECT_TRUE(absl::IsResourceExhausted((*store)->Write(second, Synced(true))));
  WriteBatch prune;
  prune.Delete("job/0");
  EXPECT_TRUE((*store)->Write(prune, Synced(true)).ok());

  free_bytes->store(int64_t{1} << 30);
  EXPECT_TRUE((*store)->Write(second, Synced(true)).ok());
  EXPECT_EQ(ScanAll(**store, "job/").size(), 2u);
}

// The store's own files stay under --store_max_size, with the headroom
// clear: writes are refused before the tables and memtables reach it.
TEST_F(RocksDbStoreTest, TheStoreStaysUnderItsSizeLimit) {
  RocksDbStoreOptions options;
  options.memtable_bytes = 64 << 10;
  options.headroom_bytes = 256 << 10;
  options.max_store_bytes = 1 << 20;
  options.free_bytes = [](const std::string&) {
    return absl::StatusOr<int64_t>(int64_t{1} << 30);
  };
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(directory_, options);
  ASSERT_TRUE(store.ok()) << store.status();
  std::mt19937 random(7);
  absl::Status status;
  int written = 0;
  for (; written < 1000; ++written) {
    // Random bytes: the tables cannot compress them away.
    std::string value(4096, '\0');
    for (char& byte : value) byte = static_cast<char>(random());
    WriteBatch batch;
    batch.Put(absl::StrCat("job/", written), value);
    status = (*store)->Write(batch, Synced(true));
    if (!status.ok()) break;
  }
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "--store_max_size"))
      << status;
  EXPECT_GT(written, 10);
  // A flush the last accepted write started may add one memtable's table.
  EXPECT_LE((*store)->StoreBytes() + options.headroom_bytes,
            options.max_store_bytes + options.memtable_bytes);
  EXPECT_EQ(ScanAll(**store, "job/").size(), static_cast<size_t>(written));
}

TEST_F(RocksDbStoreTest, OpenRefusesALimitUnderTheHeadroom) {
  RocksDbStoreOptions options;
  options.headroom_bytes = 64 << 20;
  options.max_store_bytes = 32 << 20;
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(directory_, options);
  EXPECT_TRUE(absl::IsInvalidArgument(store.status())) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), "raise the limit"))
      << store.status();
}

// --- The crash test -------------------------------------------------------

constexpr int kCrashPaddingBytes = 2000;

// Starts the crash child writing batches first, first+1, ... into
// `directory`.
std::unique_ptr<BatchWriterChild> StartCrashChild(const std::string& directory,
                                                  int64_t first) {
  return std::make_unique<BatchWriterChild>(std::vector<std::string>{
      StoreTestBinaryPath("rocksdb_store_crash_child"), directory,
      absl::StrCat(first), absl::StrCat(kCrashPaddingBytes)});
}

// Reopens the store and checks that the batches in it are exactly the whole
// batches 0 .. end-1 for some end. Returns end (-1 after a failure).
int64_t CheckRecoveredBatches(const std::string& directory) {
  std::unique_ptr<RocksDbStore> store = OpenOrDie(directory);
  if (store == nullptr) return -1;
  int64_t end = 0;
  int part = 0;
  bool ok = true;
  absl::Status status = store->Scan(
      kCrashBatchPrefix, [&](absl::string_view key, absl::string_view value) {
        if (part == 0 && key != CrashBatchKey(end, 0)) {
          ADD_FAILURE() << "batch " << end << " missing; next key " << key;
          ok = false;
          return false;
        }
        if (key != CrashBatchKey(end, part) ||
            value != CrashBatchValue(end, kCrashPaddingBytes)) {
          ADD_FAILURE() << "batch " << end << " torn at part " << part
                        << ": key " << key;
          ok = false;
          return false;
        }
        if (++part == kCrashBatchKeys) {
          part = 0;
          ++end;
        }
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  if (part != 0) {
    ADD_FAILURE() << "batch " << end << " torn: " << part << " of "
                  << kCrashBatchKeys << " keys";
    ok = false;
  }
  return status.ok() && ok ? end : -1;
}

// A child writes synced batches and is SIGKILLed at a random moment, round
// after round in the same directory: sometimes after a random number of
// acknowledged batches, sometimes a random time after it started (possibly
// while RocksDB opens or recovers). Every third round it aborts instead
// (SIGABRT, as an assertion inside RocksDB would end plateaud, which its
// units then restart). After each kill every acknowledged batch
// must be whole in the reopened store, no batch torn, and at most the one
// batch in flight beyond the last acknowledgement.
TEST_F(RocksDbStoreTest, SigkillNeverLosesAcknowledgedOrTearsBatches) {
  const uint64_t seed = std::random_device()();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 random(seed);
  const std::string db = directory_ + "/db";
  constexpr int kRounds = 10;
  int64_t next = 0;  // the first batch of the next round
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round, ", first batch ", next));
    const std::unique_ptr<BatchWriterChild> child = StartCrashChild(db, next);
    if (round % 2 == 0) {
      child->ReadAcknowledgements(
          std::uniform_int_distribution<size_t>(1, 300)(random));
      std::this_thread::sleep_for(std::chrono::microseconds(
          std::uniform_int_distribution<int>(0, 2000)(random)));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(
          std::uniform_int_distribution<int>(0, 60000)(random)));
    }
    const int signal = round % 3 == 2 ? SIGABRT : SIGKILL;
    const int wait_status = child->KillAndWait(signal);
    ASSERT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == signal)
        << "the child ended by itself (wait status " << wait_status
        << "): see its stderr";
    const std::vector<int64_t>& acknowledged = child->acknowledged();
    for (size_t i = 0; i < acknowledged.size(); ++i) {
      ASSERT_EQ(acknowledged[i], next + static_cast<int64_t>(i));
    }
    const int64_t last_acknowledged =
        acknowledged.empty() ? next - 1 : acknowledged.back();

    const int64_t end = CheckRecoveredBatches(db);
    ASSERT_GE(end, 0);
    std::printf("round %d: %zu batches acknowledged, %lld recovered in all\n",
                round, acknowledged.size(), static_cast<long long>(end));
    EXPECT_GT(end, last_acknowledged) << "an acknowledged batch was lost";
    EXPECT_LE(end, last_acknowledged + 2) << "batches appeared from nowhere";
    next = end;
  }
}

}  // namespace
}  // namespace plateau::daemon
