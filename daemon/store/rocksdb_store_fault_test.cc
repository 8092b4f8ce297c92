// RocksDbStore under storage faults, injected through a FaultInjectingFile
// System. First the WAL's appends fail with a full disk or EIO for a while:
// a write that fails says so (RESOURCE_EXHAUSTED for the full disk, naming
// the directory); once a full disk has room again the store works without a
// restart, while after EIO it stays stopped and says to restart. Then the
// matrix: every kind of file fails at every operation, in a child process
// each, and each row must be refused with a value or aborted, with a store
// that reopens holding every acknowledged batch and none torn.
#include <sys/wait.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "daemon/store/batch_writer_child.h"
#include "daemon/store/crash_batch.h"
#include "daemon/store/fault_injecting_file_system.h"
#include "daemon/store/rocksdb_store.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

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
  for (const InjectedError fault :
       {InjectedError::kNoSpace, InjectedError::kIoError}) {
    const std::string directory =
        plateau::testing::MakeTestDirectory("faulty-store") + "/db";
    auto file_system = std::make_shared<FaultInjectingFileSystem>();
    RocksDbStoreOptions options;
    options.file_system = file_system;
    absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
        RocksDbStore::Open(directory, options);
    ASSERT_TRUE(store.ok()) << store.status();
    const WriteOptions synced{.sync = true};
    std::map<int64_t, bool> acknowledged;
    int64_t number = 0;
    for (; number < 10; ++number) {
      ASSERT_TRUE((*store)->Write(MakeCrashBatch(number, 100), synced).ok());
      acknowledged[number] = true;
    }
    file_system->Set(InjectedFault{.kind = StoreFileKind::kWal,
                                   .operation = FileOperation::kAppend,
                                   .error = fault});
    for (; number < 13; ++number) {
      const absl::Status status =
          (*store)->Write(MakeCrashBatch(number, 100), synced);
      ASSERT_FALSE(status.ok()) << number;
      EXPECT_TRUE(absl::StrContains(status.message(), directory)) << status;
      // The first failure says what failed; later ones may say that the
      // store is recovering from it.
      if (number == 10 && fault == InjectedError::kNoSpace) {
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
    file_system->Set(std::nullopt);
    const absl::Time healed = absl::Now();
    if (fault == InjectedError::kIoError) {
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

// --- The matrix: every file kind, every operation, in a child each ---------

constexpr int64_t kPrefilledBatches = 10;
constexpr int64_t kChildBatches = 60;
constexpr int kChildPaddingBytes = 4096;  // rocksdb_store_fault_child's

struct ChildRun {
  std::vector<int64_t> acknowledged;
  int wait_status = 0;
  std::string report;  // its stderr
};

// Runs the fault child on `directory` and collects what it said.
ChildRun RunFaultChild(const std::string& directory, const InjectedFault& fault,
                       absl::string_view phase) {
  ChildRun run;
  const std::string report_path = directory + ".report";
  BatchWriterChild child(
      {StoreTestBinaryPath("rocksdb_store_fault_child"), directory,
       std::string(StoreFileKindName(fault.kind)),
       std::string(FileOperationName(fault.operation)),
       std::string(InjectedErrorName(fault.error)), std::string(phase),
       absl::StrCat(kPrefilledBatches), absl::StrCat(kChildBatches)},
      report_path);
  run.wait_status = child.Wait();
  run.acknowledged = child.acknowledged();
  std::ifstream report(report_path);
  std::stringstream text;
  text << report.rdbuf();
  run.report = text.str();
  return run;
}

// The line of `report` that starts with `prefix`, without it ("" if none).
std::string ReportLine(absl::string_view report, absl::string_view prefix) {
  for (absl::string_view line : absl::StrSplit(report, '\n')) {
    if (absl::StartsWith(line, prefix)) {
      return std::string(line.substr(prefix.size()));
    }
  }
  return "";
}

// Every file kind fails at every operation, with a full disk and with EIO,
// while the store opens and while it runs (writing, flushing, compacting and
// rolling its log over). Each row ends refused with a value or aborted, and
// the store reopens (on a sound disk) with every acknowledged batch whole.
TEST(RocksDbStoreFaultTest, EveryFileKindFailingAtEveryOperationLosesNothing) {
  const std::string root = plateau::testing::MakeTestDirectory("fault-matrix");
  std::set<StoreFileKind> reached;
  int row = 0;
  std::cout << "| file | operation | error | while | outcome | acknowledged "
               "| lost |\n|---|---|---|---|---|---|---|\n";
  for (const StoreFileKind kind :
       {StoreFileKind::kWal, StoreFileKind::kTable, StoreFileKind::kManifest,
        StoreFileKind::kCurrent, StoreFileKind::kOptions}) {
    for (const FileOperation operation :
         {FileOperation::kOpen, FileOperation::kAppend, FileOperation::kSync,
          FileOperation::kClose, FileOperation::kRename}) {
      for (const InjectedError error :
           {InjectedError::kNoSpace, InjectedError::kIoError}) {
        for (const absl::string_view phase : {"open", "running"}) {
          const InjectedFault fault{
              .kind = kind, .operation = operation, .error = error};
          const std::string directory = absl::StrCat(root, "/", row++);
          {
            absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
                RocksDbStore::Open(directory);
            ASSERT_TRUE(store.ok()) << store.status();
            for (int64_t number = 0; number < kPrefilledBatches; ++number) {
              ASSERT_TRUE(
                  (*store)
                      ->Write(MakeCrashBatch(number, kChildPaddingBytes),
                              WriteOptions{.sync = true})
                      .ok());
            }
          }
          const ChildRun run = RunFaultChild(directory, fault, phase);
          const std::string case_name = absl::StrCat(
              StoreFileKindName(kind), " ", FileOperationName(operation), " ",
              InjectedErrorName(error), " while ", phase);
          int64_t injected = 0;
          const bool reported =
              absl::SimpleAtoi(ReportLine(run.report, "injected: "), &injected);
          const std::string refusal = ReportLine(run.report, "refused: ");
          std::string outcome;
          if (WIFSIGNALED(run.wait_status)) {
            outcome = absl::StrCat(refusal.empty() ? "" : "refused, then ",
                                   "aborted (",
                                   strsignal(WTERMSIG(run.wait_status)), ")");
          } else {
            ASSERT_TRUE(WIFEXITED(run.wait_status)) << case_name;
            const int code = WEXITSTATUS(run.wait_status);
            ASSERT_TRUE(code == 0 || code == 3)
                << case_name << ": exit " << code << "\n"
                << run.report;
            ASSERT_TRUE(reported) << case_name << "\n" << run.report;
            if (code == 3) {
              EXPECT_TRUE(absl::StrContains(refusal, directory))
                  << case_name << ": " << refusal;
              // The status's code and RocksDB's words, not the directory.
              outcome = absl::StrCat(
                  "refused: ", refusal.substr(0, refusal.find(':')), " (",
                  refusal.substr(refusal.rfind(": ") + 2), ")");
            } else {
              outcome = injected > 0 ? "absorbed by RocksDB" : "not reached";
            }
          }
          if (!reported || injected > 0) reached.insert(kind);

          // Reopened on a sound disk: every acknowledged batch whole, the
          // child's failed batch whole or absent, nothing torn.
          absl::StatusOr<std::unique_ptr<RocksDbStore>> reopened =
              RocksDbStore::Open(directory);
          ASSERT_TRUE(reopened.ok())
              << case_name << ": " << outcome << ": " << reopened.status();
          const std::map<int64_t, int> parts = BatchParts(**reopened);
          std::vector<int64_t> expected(run.acknowledged);
          for (int64_t number = 0; number < kPrefilledBatches; ++number) {
            expected.push_back(number);
          }
          int lost = 0;
          for (const int64_t number : expected) {
            const auto found = parts.find(number);
            if (found == parts.end() || found->second != kCrashBatchKeys)
              ++lost;
          }
          for (const auto& [number, held] : parts) {
            EXPECT_EQ(held, kCrashBatchKeys)
                << case_name << ": batch " << number << " is torn";
          }
          EXPECT_EQ(lost, 0) << case_name << ": " << outcome;
          std::cout << "| " << StoreFileKindName(kind) << " | "
                    << FileOperationName(operation) << " | "
                    << InjectedErrorName(error) << " | " << phase << " | "
                    << outcome << " | "
                    << kPrefilledBatches +
                           static_cast<int64_t>(run.acknowledged.size())
                    << " | " << lost << " |\n";
        }
      }
    }
  }
  std::cout.flush();
  // Every kind of file was failed somewhere: the matrix tests what it names.
  for (const StoreFileKind kind :
       {StoreFileKind::kWal, StoreFileKind::kTable, StoreFileKind::kManifest,
        StoreFileKind::kCurrent, StoreFileKind::kOptions}) {
    EXPECT_TRUE(reached.count(kind) > 0)
        << StoreFileKindName(kind) << " never failed";
  }
}

}  // namespace
}  // namespace plateau::daemon
