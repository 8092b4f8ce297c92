#include "common/file_util.h"

#include <filesystem>
#include <string>
#include <vector>

#include "common/test_files.h"
#include "gtest/gtest.h"

namespace plateau {
namespace {

namespace fs = std::filesystem;
using ::plateau::testing::ListTestDirectory;
using ::plateau::testing::MakeTestDirectory;

TEST(FileUtilTest, Sha256OfKnownInput) {
  EXPECT_EQ(Sha256Hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(FileUtilTest, WriteFileAtomicallyWritesPiecesAndLeavesNoTemporary) {
  const std::string directory = MakeTestDirectory("file_util");
  const std::string path = directory + "/out.bin";
  ASSERT_TRUE(WriteFileSynced(path, "old", 3).ok());
  const std::vector<absl::string_view> pieces = {"hello", ", ", "", "world"};
  ASSERT_TRUE(WriteFileAtomically(path, pieces).ok());
  absl::StatusOr<std::string> content = ReadFileToString(path);
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, "hello, world");
  EXPECT_EQ(ListTestDirectory(directory), std::vector<std::string>{"out.bin"});
}

TEST(FileUtilTest, WriteFileAtomicallyReportsMissingDirectory) {
  const std::string path = MakeTestDirectory("file_util") + "/missing/out.bin";
  const absl::Status status = WriteFileAtomically(path, {"x"});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(path), absl::string_view::npos) << status;
}

TEST(FileUtilTest, ReplaceDirectoryReplacesNonEmptyOne) {
  const std::string directory = MakeTestDirectory("file_util");
  const std::string output = directory + "/output";
  fs::create_directory(output);
  ASSERT_TRUE(WriteFileSynced(output + "/old.txt", "old", 3).ok());
  absl::StatusOr<std::string> staged = MakeSiblingDirectory(output, "tmp");
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_TRUE(WriteFileSynced(*staged + "/new.txt", "new", 3).ok());

  EXPECT_EQ(ReplaceDirectory(*staged, output, /*overwrite=*/false).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ReplaceDirectory(*staged, output, /*overwrite=*/true).ok());
  EXPECT_EQ(ListTestDirectory(output), std::vector<std::string>{"new.txt"});
  EXPECT_EQ(ListTestDirectory(directory), std::vector<std::string>{"output"});
}

// The writer's files appear together or not at all: a failing writer
// leaves the old output and no staging directory behind.
TEST(FileUtilTest, WriteDirectoryAtomicallyInstallsAllOrNothing) {
  const std::string directory = MakeTestDirectory("file_util");
  const std::string output = directory + "/output";
  const auto write_file = [](const char* name) {
    return [name](const std::string& staged) {
      return WriteFileSynced(staged + "/" + name, "x", 1);
    };
  };
  ASSERT_TRUE(WriteDirectoryAtomically(output, /*overwrite=*/false,
                                       write_file("first.txt"))
                  .ok());
  EXPECT_EQ(ListTestDirectory(output), std::vector<std::string>{"first.txt"});

  const absl::Status failed = WriteDirectoryAtomically(
      output, /*overwrite=*/true, [](const std::string& staged) {
        EXPECT_TRUE(WriteFileSynced(staged + "/partial.txt", "x", 1).ok());
        return absl::DataLossError("the writer failed");
      });
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ListTestDirectory(output), std::vector<std::string>{"first.txt"});
  EXPECT_EQ(ListTestDirectory(directory), std::vector<std::string>{"output"});

  EXPECT_EQ(WriteDirectoryAtomically(output, /*overwrite=*/false,
                                     write_file("second.txt"))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(WriteDirectoryAtomically(output, /*overwrite=*/true,
                                       write_file("second.txt"))
                  .ok());
  EXPECT_EQ(ListTestDirectory(output), std::vector<std::string>{"second.txt"});
  EXPECT_EQ(ListTestDirectory(directory), std::vector<std::string>{"output"});
}

TEST(FileUtilTest, MappedFileMapsWholeFile) {
  const std::string path = MakeTestDirectory("file_util") + "/data.bin";
  ASSERT_TRUE(WriteFileSynced(path, "0123456789", 10).ok());
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size_bytes(), 10u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*file)->data()), 10),
            "0123456789");
  EXPECT_EQ(MappedFile::Open(path + ".missing").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace plateau
