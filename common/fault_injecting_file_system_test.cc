#include "common/fault_injecting_file_system.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/test_files.h"
#include "gtest/gtest.h"

namespace plateau {
namespace {

using testing::ListTestDirectory;
using testing::MakeTestDirectory;
using testing::ReadTestFile;
using testing::WriteTestFile;

constexpr StorageFault kFaults[] = {
    StorageFault::kNoSpace, StorageFault::kIoError, StorageFault::kShortWrite,
    StorageFault::kCrash};

TEST(FaultInjectingFileSystemTest, CountsEveryStepAndFailsTheChosenOne) {
  const std::string directory = MakeTestDirectory("faults");
  FaultInjectingFileSystem counting;
  ASSERT_TRUE(WriteFileSynced(directory + "/a", "abcd", 4, counting).ok());
  // create, append, sync, close.
  EXPECT_EQ(counting.steps(), 4) << absl::StrJoin(counting.log(), "\n");

  FaultInjectingFileSystem full;
  full.InjectAt(2, StorageFault::kNoSpace);
  const absl::Status status =
      WriteFileSynced(directory + "/b", "abcd", 4, full);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_EQ(ReadTestFile(directory + "/b"), "");

  FaultInjectingFileSystem short_write;
  short_write.InjectAt(2, StorageFault::kShortWrite);
  EXPECT_FALSE(WriteFileSynced(directory + "/c", "abcd", 4, short_write).ok());
  EXPECT_EQ(ReadTestFile(directory + "/c"), "ab");

  FaultInjectingFileSystem unreadable;
  unreadable.FailReads(true);
  EXPECT_FALSE(unreadable.MapFile(directory + "/a").ok());
}

TEST(FaultInjectingFileSystemTest, ACrashTearsWhatWasNotSynced) {
  const std::string directory = MakeTestDirectory("crash");
  FaultInjectingFileSystem crashing;
  crashing.InjectAt(4, StorageFault::kCrash);  // before the second append
  auto file = crashing.NewWritableFile(directory + "/log", false);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append("synced").ok());
  ASSERT_TRUE((*file)->Sync().ok());
  EXPECT_TRUE(absl::IsAborted((*file)->Append("later")));
  EXPECT_TRUE(crashing.crashed());
  EXPECT_TRUE(absl::IsAborted(crashing.CreateDirectory(directory + "/d")));
  EXPECT_EQ(ReadTestFile(directory + "/log"), "synced");

  // Unsynced bytes, followed through a rename: half of them survive.
  FaultInjectingFileSystem renaming;
  renaming.InjectAt(5, StorageFault::kCrash);  // after the rename
  auto torn = renaming.NewWritableFile(directory + "/torn", false);
  ASSERT_TRUE(torn.ok()) << torn.status();
  ASSERT_TRUE((*torn)->Append("12345678").ok());
  ASSERT_TRUE((*torn)->Close().ok());
  ASSERT_TRUE(renaming.Rename(directory + "/torn", directory + "/moved").ok());
  EXPECT_FALSE(renaming.SyncDirectory(directory).ok());
  EXPECT_EQ(ReadTestFile(directory + "/moved"), "1234");
}

// The contract of WriteFileAtomically, at every step under every fault: the
// file is the old one or the whole new one, and a failed write (but a
// crashed one, which cannot clean up) leaves no temporary file.
TEST(FaultInjectingFileSystemTest, AnAtomicWriteIsOldOrNewAtEveryStep) {
  const std::string directory = MakeTestDirectory("atomic");
  const std::string path = directory + "/file";
  const std::string old_text = "old contents";
  const std::string new_text(10000, 'n');
  FaultInjectingFileSystem counting;
  ASSERT_TRUE(
      WriteFileAtomically(path, {new_text}, Durability::kSynced, counting)
          .ok());
  const int64_t steps = counting.steps();
  ASSERT_GE(steps, 6);
  for (const StorageFault fault : kFaults) {
    for (int64_t step = 1; step <= steps; ++step) {
      SCOPED_TRACE(absl::StrCat(StorageFaultName(fault), " at step ", step));
      for (const std::string& name : ListTestDirectory(directory)) {
        ASSERT_TRUE(PosixFileSystem().RemoveAll(directory + "/" + name).ok());
      }
      WriteTestFile(path, old_text);
      FaultInjectingFileSystem faulty;
      faulty.InjectAt(step, fault);
      const absl::Status status =
          WriteFileAtomically(path, {new_text}, Durability::kSynced, faulty);
      const std::string text = ReadTestFile(path);
      EXPECT_TRUE(text == old_text || text == new_text) << text.size();
      if (!status.ok() && fault != StorageFault::kCrash) {
        EXPECT_EQ(ListTestDirectory(directory),
                  std::vector<std::string>{"file"});
      }
      if (status.ok()) {
        EXPECT_EQ(text, new_text);
      }
    }
  }
}

}  // namespace
}  // namespace plateau
