// One test suite for every Store implementation: each test runs against
// MemoryStore and RocksDbStore and must pass unchanged on both.
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/store/memory_store.h"
#include "daemon/store/rocksdb_store.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct StoreFactory {
  std::string name;
  // Opens a store in `directory`: fresh, empty and removed after the test.
  std::function<absl::StatusOr<std::unique_ptr<Store>>(
      const std::string& directory)>
      open;
};

void PrintTo(const StoreFactory& factory, std::ostream* os) {
  *os << factory.name;
}

std::string MakeTestDirectory() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(
      base != nullptr && *base != '\0' ? base : "/tmp", "/store-XXXXXX");
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

WriteOptions Synced(bool sync) {
  WriteOptions options;
  options.sync = sync;
  return options;
}

// Byte i of a large value: all 256 byte values, not a short period.
std::string LargeValue(size_t bytes, uint32_t seed) {
  std::string value(bytes, '\0');
  uint32_t state = seed * 2654435761u + 1;
  for (char& byte : value) {
    state = state * 1664525u + 1013904223u;
    byte = static_cast<char>(state >> 24);
  }
  return value;
}

class StoreConformanceTest : public testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    directory_ = MakeTestDirectory();
    absl::StatusOr<std::unique_ptr<Store>> store = GetParam().open(directory_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  void TearDown() override {
    store_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }

  void Put(absl::string_view key, absl::string_view value) {
    WriteBatch batch;
    batch.Put(key, value);
    ASSERT_TRUE(store_->Write(batch, Synced(true)).ok());
  }

  std::optional<std::string> Get(absl::string_view key) {
    absl::StatusOr<std::optional<std::string>> value = store_->Get(key);
    EXPECT_TRUE(value.ok()) << value.status();
    return value.ok() ? *value : std::nullopt;
  }

  KeyValues ScanAll(absl::string_view prefix) {
    KeyValues visited;
    absl::Status status = store_->Scan(
        prefix, [&](absl::string_view key, absl::string_view value) {
          visited.emplace_back(std::string(key), std::string(value));
          return true;
        });
    EXPECT_TRUE(status.ok()) << status;
    return visited;
  }

  std::string directory_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreConformanceTest, GetOfAbsentKeyIsNullopt) {
  EXPECT_EQ(Get("absent"), std::nullopt);
}

TEST_P(StoreConformanceTest, PutThenGetAndOverwrite) {
  Put("job/1", "queued");
  EXPECT_EQ(Get("job/1"), "queued");
  Put("job/1", "running");
  EXPECT_EQ(Get("job/1"), "running");
  EXPECT_EQ(Get("job/2"), std::nullopt);
}

TEST_P(StoreConformanceTest, DeleteRemovesKeyAndAbsentKeyIsNoError) {
  Put("job/1", "queued");
  WriteBatch batch;
  batch.Delete("job/1");
  batch.Delete("never/written");
  ASSERT_TRUE(store_->Write(batch, Synced(true)).ok());
  EXPECT_EQ(Get("job/1"), std::nullopt);
  EXPECT_TRUE(ScanAll("").empty());
}

TEST_P(StoreConformanceTest, EmptyBatchIsNoOp) {
  EXPECT_TRUE(store_->Write(WriteBatch(), Synced(true)).ok());
  EXPECT_TRUE(store_->Write(WriteBatch(), Synced(false)).ok());
  EXPECT_TRUE(ScanAll("").empty());
}

TEST_P(StoreConformanceTest, BatchAppliesOperationsInOrder) {
  Put("gone", "before");
  WriteBatch batch;
  batch.Put("put-then-delete", "1");
  batch.Delete("put-then-delete");
  batch.Delete("delete-then-put");
  batch.Put("delete-then-put", "2");
  batch.Put("put-twice", "first");
  batch.Put("put-twice", "second");
  batch.Delete("gone");
  ASSERT_TRUE(store_->Write(batch, Synced(true)).ok());
  EXPECT_EQ(Get("put-then-delete"), std::nullopt);
  EXPECT_EQ(Get("delete-then-put"), "2");
  EXPECT_EQ(Get("put-twice"), "second");
  EXPECT_EQ(Get("gone"), std::nullopt);
  EXPECT_EQ(ScanAll(""),
            (KeyValues{{"delete-then-put", "2"}, {"put-twice", "second"}}));
}

TEST_P(StoreConformanceTest, UnsyncedWritesAreVisible) {
  WriteBatch batch;
  batch.Put("log/1", "line");
  ASSERT_TRUE(store_->Write(batch, Synced(false)).ok());
  EXPECT_EQ(Get("log/1"), "line");
}

TEST_P(StoreConformanceTest, ScanVisitsPrefixInKeyOrderWithinBounds) {
  for (const char* key :
       {"a/2", "b/", "a0", "a", "a/10", "a/", "a/1", "`/", "a./"}) {
    Put(key, absl::StrCat("v", key));
  }
  EXPECT_EQ(
      ScanAll("a/"),
      (KeyValues{
          {"a/", "va/"}, {"a/1", "va/1"}, {"a/10", "va/10"}, {"a/2", "va/2"}}));
  EXPECT_EQ(ScanAll("a/1"), (KeyValues{{"a/1", "va/1"}, {"a/10", "va/10"}}));
  EXPECT_EQ(ScanAll("b/"), (KeyValues{{"b/", "vb/"}}));
  EXPECT_TRUE(ScanAll("c").empty());
  EXPECT_TRUE(ScanAll("a/3").empty());
}

TEST_P(StoreConformanceTest, ScanWithEmptyPrefixVisitsEverything) {
  Put("z", "3");
  Put("a", "1");
  Put("m", "2");
  EXPECT_EQ(ScanAll(""), (KeyValues{{"a", "1"}, {"m", "2"}, {"z", "3"}}));
}

TEST_P(StoreConformanceTest, ScanStopsWhenVisitReturnsFalse) {
  for (int i = 0; i < 10; ++i) Put(absl::StrCat("k/", i), "v");
  std::vector<std::string> visited;
  absl::Status status =
      store_->Scan("k/", [&](absl::string_view key, absl::string_view) {
        visited.emplace_back(key);
        return visited.size() < 3;
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(visited, (std::vector<std::string>{"k/0", "k/1", "k/2"}));
}

KeyValues ScanAfterAll(Store& store, absl::string_view prefix,
                       absl::string_view start_after) {
  KeyValues visited;
  absl::Status status = store.ScanAfter(
      prefix, start_after, [&](absl::string_view key, absl::string_view value) {
        visited.emplace_back(std::string(key), std::string(value));
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  return visited;
}

TEST_P(StoreConformanceTest, ScanAfterStartsPastTheGivenKey) {
  for (const char* key : {"a", "a/1", "a/10", "a/2", "a/3", "b/1"}) {
    Put(key, absl::StrCat("v", key));
  }
  // Present key: the scan starts right after it.
  EXPECT_EQ(ScanAfterAll(*store_, "a/", "a/1"),
            (KeyValues{{"a/10", "va/10"}, {"a/2", "va/2"}, {"a/3", "va/3"}}));
  // Absent key: the scan starts at the next key there is.
  EXPECT_EQ(ScanAfterAll(*store_, "a/", "a/11"),
            (KeyValues{{"a/2", "va/2"}, {"a/3", "va/3"}}));
  // Before the prefix (or empty): the whole prefix.
  EXPECT_EQ(ScanAfterAll(*store_, "a/", "").size(), 4u);
  EXPECT_EQ(ScanAfterAll(*store_, "a/", "a").size(), 4u);
  // At or past the range's end: nothing, and never keys of the next prefix.
  EXPECT_TRUE(ScanAfterAll(*store_, "a/", "a/3").empty());
  EXPECT_TRUE(ScanAfterAll(*store_, "a/", "a/9").empty());
  EXPECT_TRUE(ScanAfterAll(*store_, "a/", "b").empty());
  // visit returning false stops it as it stops Scan.
  std::vector<std::string> visited;
  ASSERT_TRUE(store_
                  ->ScanAfter("a/", "a/10",
                              [&](absl::string_view key, absl::string_view) {
                                visited.emplace_back(key);
                                return false;
                              })
                  .ok());
  EXPECT_EQ(visited, std::vector<std::string>{"a/2"});
}

TEST_P(StoreConformanceTest, ScanAfterOverManyKeysSeesOnlyTheTail) {
  for (int i = 0; i < 1000; ++i) {
    Put(absl::StrFormat("log/j-1/%016d", i), absl::StrCat(i));
  }
  Put("log/j-2/0000000000000000", "other job");
  const KeyValues tail =
      ScanAfterAll(*store_, "log/j-1/", absl::StrFormat("log/j-1/%016d", 995));
  ASSERT_EQ(tail.size(), 4u);
  EXPECT_EQ(tail.front().second, "996");
  EXPECT_EQ(tail.back().second, "999");
}

TEST_P(StoreConformanceTest, EmptyValueIsPresent) {
  Put("empty", "");
  EXPECT_EQ(Get("empty"), std::optional<std::string>(""));
  EXPECT_EQ(ScanAll("empty"), (KeyValues{{"empty", ""}}));
}

TEST_P(StoreConformanceTest, BinaryKeysAndValues) {
  const std::string nul_a("k\0a", 3);
  const std::string nul_b("k\0b", 3);
  const std::string value("\0\xff\x00\x7f\xfe", 5);
  for (const std::string& key :
       {nul_a, nul_b, std::string("k"), std::string("k\xff"),
        std::string("k\xff\xff"), std::string("k\xff\x00", 3), std::string("l"),
        std::string("\xff"), std::string("\xff\xff\x01"),
        std::string("\xfe\xff")}) {
    Put(key, absl::StrCat(key, value));
  }
  EXPECT_EQ(Get(nul_a), absl::StrCat(nul_a, value));
  EXPECT_EQ(Get(std::string("k\0c", 3)), std::nullopt);
  EXPECT_EQ(ScanAll(std::string("k\0", 2)),
            (KeyValues{{nul_a, absl::StrCat(nul_a, value)},
                       {nul_b, absl::StrCat(nul_b, value)}}));
  // The bound past "k\xff" carries into "l", which must not be visited.
  const KeyValues k_ff = ScanAll("k\xff");
  ASSERT_EQ(k_ff.size(), 3u);
  EXPECT_EQ(k_ff[0].first, "k\xff");
  EXPECT_EQ(k_ff[1].first, std::string("k\xff\x00", 3));
  EXPECT_EQ(k_ff[2].first, "k\xff\xff");
  // An all-0xff prefix has no upper bound.
  const KeyValues ff = ScanAll("\xff");
  ASSERT_EQ(ff.size(), 2u);
  EXPECT_EQ(ff[0].first, "\xff");
  EXPECT_EQ(ff[1].first, "\xff\xff\x01");
  EXPECT_EQ(ff[1].second, absl::StrCat("\xff\xff\x01", value));
}

TEST_P(StoreConformanceTest, LargeValues) {
  constexpr size_t kMiB = 1 << 20;
  // Sixteen MiB: more than a RocksDB memtable, so some are read back from
  // table files.
  for (uint32_t i = 0; i < 16; ++i) {
    Put(absl::StrCat("large/", absl::Dec(i, absl::kZeroPad2)),
        LargeValue(kMiB, i));
  }
  for (uint32_t i = 0; i < 16; ++i) {
    std::optional<std::string> value =
        Get(absl::StrCat("large/", absl::Dec(i, absl::kZeroPad2)));
    ASSERT_TRUE(value.has_value());
    EXPECT_TRUE(*value == LargeValue(kMiB, i)) << "value " << i << " differs";
  }
  const KeyValues scanned = ScanAll("large/");
  ASSERT_EQ(scanned.size(), 16u);
  EXPECT_TRUE(scanned[7].second == LargeValue(kMiB, 7));
}

TEST_P(StoreConformanceTest, VisitMayWriteWithoutChangingTheScan) {
  Put("v/1", "a");
  Put("v/2", "b");
  Put("v/3", "c");
  std::vector<std::string> visited;
  absl::Status status =
      store_->Scan("v/", [&](absl::string_view key, absl::string_view) {
        visited.emplace_back(key);
        if (key == "v/1") {
          WriteBatch batch;
          batch.Delete("v/3");
          batch.Put("v/4", "d");
          EXPECT_TRUE(store_->Write(batch, Synced(true)).ok());
          EXPECT_EQ(Get("v/4"), "d");
        }
        return true;
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(visited, (std::vector<std::string>{"v/1", "v/2", "v/3"}));
  EXPECT_EQ(ScanAll("v/"),
            (KeyValues{{"v/1", "a"}, {"v/2", "b"}, {"v/4", "d"}}));
}

TEST_P(StoreConformanceTest, ConcurrentSyncedWritersAllLand) {
  constexpr int kThreads = 8;
  constexpr int kBatchesPerThread = 500;
  absl::Mutex mutex;
  absl::Status first_error;
  const absl::Time start = absl::Now();
  std::vector<std::thread> writers;
  for (int thread = 0; thread < kThreads; ++thread) {
    writers.emplace_back([&, thread] {
      for (int i = 0; i < kBatchesPerThread; ++i) {
        WriteBatch batch;
        const std::string key = absl::StrFormat("w/%d/%04d", thread, i);
        batch.Put(absl::StrCat(key, "/a"), key);
        batch.Put(absl::StrCat(key, "/b"), key);
        absl::Status status = store_->Write(batch, Synced(true));
        if (!status.ok()) {
          absl::MutexLock lock(&mutex);
          first_error.Update(status);
          return;
        }
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_TRUE(first_error.ok()) << first_error;
  std::printf("%s: %d synced batches from %d threads in %.3f s (%.0f/s)\n",
              GetParam().name.c_str(), kThreads * kBatchesPerThread, kThreads,
              seconds, kThreads * kBatchesPerThread / seconds);

  const KeyValues all = ScanAll("w/");
  ASSERT_EQ(all.size(), 2u * kThreads * kBatchesPerThread);
  size_t index = 0;
  for (int thread = 0; thread < kThreads; ++thread) {
    for (int i = 0; i < kBatchesPerThread; ++i) {
      const std::string key = absl::StrFormat("w/%d/%04d", thread, i);
      EXPECT_EQ(all[index++], std::make_pair(absl::StrCat(key, "/a"), key));
      EXPECT_EQ(all[index++], std::make_pair(absl::StrCat(key, "/b"), key));
    }
  }
}

// A writer moves a pair of keys forward one batch at a time (deleting the old
// pair, putting the new one); every scan must see exactly one whole pair.
TEST_P(StoreConformanceTest, ScanDuringWritesSeesWholeBatches) {
  constexpr int kBatches = 2000;
  auto pair_batch = [](int i) {
    WriteBatch batch;
    if (i > 0) {
      batch.Delete(absl::StrFormat("pair/%05d/k1", i - 1));
      batch.Delete(absl::StrFormat("pair/%05d/k2", i - 1));
    }
    batch.Put(absl::StrFormat("pair/%05d/k1", i), absl::StrCat(i));
    batch.Put(absl::StrFormat("pair/%05d/k2", i), absl::StrCat(i));
    batch.Put("pair/~last", absl::StrCat(i));
    return batch;
  };
  ASSERT_TRUE(store_->Write(pair_batch(0), Synced(true)).ok());

  std::atomic<bool> writing{true};
  absl::Status writer_status;
  std::thread writer([&] {
    for (int i = 1; i < kBatches && writer_status.ok(); ++i) {
      writer_status = store_->Write(pair_batch(i), Synced(i % 16 == 0));
    }
    writing = false;
  });
  int scans = 0;
  int distinct_pairs_seen = 0;
  std::string previous_last;
  bool torn = false;
  while (!torn && (writing || scans == 0)) {
    const KeyValues pair = ScanAll("pair/");
    ++scans;
    int number = -1;
    torn = pair.size() != 3 || pair[2].first != "pair/~last" ||
           !absl::SimpleAtoi(pair[2].second, &number) ||
           pair[0] != std::make_pair(absl::StrFormat("pair/%05d/k1", number),
                                     pair[2].second) ||
           pair[1] != std::make_pair(absl::StrFormat("pair/%05d/k2", number),
                                     pair[2].second);
    EXPECT_FALSE(torn) << "scan " << scans << " saw "
                       << testing::PrintToString(pair);
    if (pair.size() == 3 && pair[2].second != previous_last) {
      ++distinct_pairs_seen;
      previous_last = pair[2].second;
    }
  }
  writer.join();
  ASSERT_TRUE(writer_status.ok()) << writer_status;
  std::printf("%s: %d scans saw %d distinct pairs\n", GetParam().name.c_str(),
              scans, distinct_pairs_seen);
  EXPECT_EQ(ScanAll("pair/").size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreConformanceTest,
    testing::Values(
        StoreFactory{
            "Memory",
            [](const std::string&) -> absl::StatusOr<std::unique_ptr<Store>> {
              return std::make_unique<MemoryStore>();
            }},
        StoreFactory{"RocksDb",
                     [](const std::string& directory)
                         -> absl::StatusOr<std::unique_ptr<Store>> {
                       absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
                           RocksDbStore::Open(directory + "/db");
                       if (!store.ok()) return store.status();
                       return std::unique_ptr<Store>(std::move(*store));
                     }}),
    [](const testing::TestParamInfo<StoreFactory>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace plateau::daemon
