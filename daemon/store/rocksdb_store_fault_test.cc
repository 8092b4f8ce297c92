// RocksDbStore under storage faults: the WAL's appends and syncs fail with a
// full disk or EIO for a while, through a fault-injecting rocksdb::
// FileSystem. A write that fails says so (RESOURCE_EXHAUSTED for the full
// disk, naming the directory); once a full disk has room again the store
// works without a restart, while after EIO it stays stopped and says to
// restart; and a reopened store holds every acknowledged batch, and each
// failed one whole or not at all.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "daemon/store/crash_batch.h"
#include "daemon/store/rocksdb_store.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "rocksdb/file_system.h"
#include "rocksdb/io_status.h"

namespace plateau::daemon {
namespace {

enum class WalFault { kNone, kNoSpace, kIoError };

// Fails every append and sync of the WAL (*.log) while a fault is set.
class FaultyWalFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultyWalFileSystem()
      : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FaultyWalFileSystem"; }

  void Set(WalFault fault) { fault_.store(fault); }

  rocksdb::IOStatus NewWritableFile(
      const std::string& path, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus status =
        target()->NewWritableFile(path, options, result, debug);
    if (status.ok() && absl::EndsWith(path, ".log")) {
      *result = std::make_unique<File>(std::move(*result), fault_);
    }
    return status;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> base,
         const std::atomic<WalFault>& fault)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(base)), fault_(fault) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      if (rocksdb::IOStatus status = Injected(); !status.ok()) return status;
      return FSWritableFileOwnerWrapper::Append(data, options, debug);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      if (rocksdb::IOStatus status = Injected(); !status.ok()) return status;
      return FSWritableFileOwnerWrapper::Append(data, options, info, debug);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      if (rocksdb::IOStatus status = Injected(); !status.ok()) return status;
      return FSWritableFileOwnerWrapper::Sync(options, debug);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      if (rocksdb::IOStatus status = Injected(); !status.ok()) return status;
      return FSWritableFileOwnerWrapper::Fsync(options, debug);
    }

   private:
    rocksdb::IOStatus Injected() const {
      switch (fault_.load()) {
        case WalFault::kNoSpace:
          return rocksdb::IOStatus::NoSpace("injected: disk full");
        case WalFault::kIoError:
          return rocksdb::IOStatus::IOError("injected: EIO");
        case WalFault::kNone:
          break;
      }
      return rocksdb::IOStatus::OK();
    }

    const std::atomic<WalFault>& fault_;
  };

  std::atomic<WalFault> fault_{WalFault::kNone};
};

// batch number -> the parts of it the store holds.
std::map<int64_t, int> BatchParts(Store& store) {
  std::map<int64_t, int> parts;
  const absl::Status status = store.Scan(
      kCrashBatchPrefix, [&](absl::string_view key, absl::string_view) {
        int64_t number = 0;
        EXPECT_TRUE(absl::SimpleAtoi(
            key.substr(sizeof(kCrashBatchPrefix) - 1, 10), &number))
            << key;
        ++parts[number];
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  return parts;
}

TEST(RocksDbStoreFaultTest, AFailedWalWriteFailsThatWriteAndLosesNothing) {
  for (const WalFault fault : {WalFault::kNoSpace, WalFault::kIoError}) {
    const std::string directory =
        plateau::testing::MakeTestDirectory("faulty-store") + "/db";
    auto file_system = std::make_shared<FaultyWalFileSystem>();
    absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
        RocksDbStore::Open(directory, file_system);
    ASSERT_TRUE(store.ok()) << store.status();
    const WriteOptions synced{.sync = true};
    std::map<int64_t, bool> acknowledged;
    int64_t number = 0;
    for (; number < 10; ++number) {
      ASSERT_TRUE((*store)->Write(MakeCrashBatch(number, 100), synced).ok());
      acknowledged[number] = true;
    }
    file_system->Set(fault);
    for (; number < 13; ++number) {
      const absl::Status status =
          (*store)->Write(MakeCrashBatch(number, 100), synced);
      ASSERT_FALSE(status.ok()) << number;
      EXPECT_TRUE(absl::StrContains(status.message(), directory)) << status;
      // The first failure says what failed; later ones may say that the
      // store is recovering from it.
      if (number == 10 && fault == WalFault::kNoSpace) {
        EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
      } else {
        EXPECT_TRUE(absl::IsUnavailable(status) ||
                    absl::IsResourceExhausted(status))
            << status;
      }
      acknowledged[number] = false;
    }
    // The disk works again. After a full disk so does the store, in the
    // same process, once RocksDB has resumed. After EIO it stays stopped,
    // saying how to recover: a restart, replaying the log.
    file_system->Set(WalFault::kNone);
    const absl::Time healed = absl::Now();
    if (fault == WalFault::kIoError) {
      const absl::Status status =
          (*store)->Write(MakeCrashBatch(number, 100), synced);
      EXPECT_TRUE(absl::IsUnavailable(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "restart plateaud"))
          << status;
      acknowledged[number++] = false;
    } else {
      absl::Status status;
      while (!(status = (*store)->Write(MakeCrashBatch(number, 100), synced))
                  .ok() &&
             absl::Now() - healed < absl::Seconds(30)) {
        acknowledged[number++] = false;
        absl::SleepFor(absl::Milliseconds(50));
      }
      ASSERT_TRUE(status.ok()) << status;
      acknowledged[number++] = true;
      std::cout << "disk full: the store wrote again "
                << absl::FormatDuration(absl::Now() - healed)
                << " after the disk healed\n";
      for (const int64_t last = number + 3; number < last; ++number) {
        ASSERT_TRUE((*store)->Write(MakeCrashBatch(number, 100), synced).ok());
        acknowledged[number] = true;
      }
    }
    store->reset();

    absl::StatusOr<std::unique_ptr<RocksDbStore>> reopened =
        RocksDbStore::Open(directory);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    const std::map<int64_t, int> parts = BatchParts(**reopened);
    for (const auto& [batch, was_acknowledged] : acknowledged) {
      const auto found = parts.find(batch);
      const int held = found == parts.end() ? 0 : found->second;
      if (was_acknowledged) {
        EXPECT_EQ(held, kCrashBatchKeys) << "acknowledged batch " << batch;
      } else {
        EXPECT_TRUE(held == 0 || held == kCrashBatchKeys)
            << "failed batch " << batch << " is torn: " << held;
      }
    }
  }
}

}  // namespace
}  // namespace plateau::daemon
