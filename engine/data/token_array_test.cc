#include "engine/data/token_array.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::WriteTestFile;
using ::testing::HasSubstr;

// The bytes np.save writes for a 1-D array of `count` ids of `descr`
// (version 1: a uint16 header length, the header padded with spaces to a
// multiple of 64 bytes and ended by a newline), without the ids.
std::string NpyHeader(const std::string& descr, const std::string& shape,
                      int version = 1) {
  std::string header =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': False, 'shape': ", shape, ", }");
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes("\x93NUMPY", 6);
  bytes += static_cast<char>(version);
  bytes += '\0';
  const size_t length = header.size();
  bytes += static_cast<char>(length & 0xff);
  bytes += static_cast<char>((length >> 8) & 0xff);
  if (version != 1) bytes += std::string(2, '\0');
  return bytes + header;
}

template <typename Id>
std::string IdBytes(const std::vector<Id>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()),
                     ids.size() * sizeof(Id));
}

class TokenArrayTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = absl::StrCat(directory_, "/", name);
    WriteTestFile(path, bytes);
    return path;
  }

  // The error of opening `bytes` as a token array.
  std::string OpenError(const std::string& bytes, uint32_t stated = 0) {
    absl::StatusOr<std::unique_ptr<TokenArray>> array =
        TokenArray::Open(Write("bad.npy", bytes), stated);
    EXPECT_FALSE(array.ok());
    return array.ok() ? "" : std::string(array.status().message());
  }

  const std::string directory_ = MakeTestDirectory("token_array_test");
};

TEST_F(TokenArrayTest, ReadsNpyArraysOfBothWidthsAndVersions) {
  const std::vector<uint16_t> narrow = {3, 65535, 0, 7};
  const std::vector<uint32_t> wide = {70000, 1, 4294967295u};
  for (const int version : {1, 2, 3}) {
    absl::StatusOr<std::unique_ptr<TokenArray>> array =
        TokenArray::Open(Write("narrow.npy", NpyHeader("<u2", "(4,)", version) +
                                                 IdBytes(narrow)),
                         0);
    ASSERT_TRUE(array.ok()) << array.status();
    ASSERT_EQ((*array)->tokens(), 4);
    EXPECT_EQ((*array)->bytes_per_token(), 2u);
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ((*array)->At(i), narrow[i]);
  }
  absl::StatusOr<std::unique_ptr<TokenArray>> array = TokenArray::Open(
      Write("wide.npy", NpyHeader("<u4", "(3,)") + IdBytes(wide)), 4);
  ASSERT_TRUE(array.ok()) << array.status();
  ASSERT_EQ((*array)->tokens(), 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ((*array)->At(i), wide[i]);
}

TEST_F(TokenArrayTest, ReadsRawArraysOfAStatedWidth) {
  const std::vector<uint16_t> ids = {5, 50256, 9};
  absl::StatusOr<std::unique_ptr<TokenArray>> array =
      TokenArray::Open(Write("train.bin", IdBytes(ids)), 2);
  ASSERT_TRUE(array.ok()) << array.status();
  ASSERT_EQ((*array)->tokens(), 3);
  EXPECT_EQ((*array)->At(1), 50256u);
  // The same bytes as uint32: 6 bytes are not a whole number of them.
  EXPECT_THAT(OpenError(IdBytes(ids), 4),
              HasSubstr("6 bytes, not a whole number of uint32 ids"));
  absl::StatusOr<std::unique_ptr<TokenArray>> empty =
      TokenArray::Open(Write("empty.bin", ""), 2);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)->tokens(), 0);
}

TEST_F(TokenArrayTest, WhatIsWrongWithAFileIsNamed) {
  const std::string ids = IdBytes(std::vector<uint16_t>{1, 2, 3, 4});
  EXPECT_THAT(OpenError(ids), HasSubstr("has no .npy header: state the width"));
  EXPECT_THAT(OpenError(NpyHeader("<u2", "(4,)") + ids, 4),
              HasSubstr("is a .npy of uint16 ids, not the uint32 stated"));
  EXPECT_THAT(OpenError(NpyHeader("<u2", "(5,)") + ids),
              HasSubstr("is truncated"));
  EXPECT_THAT(OpenError(NpyHeader("<u2", "(3,)") + ids),
              HasSubstr("is longer"));
  EXPECT_THAT(OpenError(NpyHeader("<i8", "(1,)") + ids),
              HasSubstr("dtype '<i8' is not one a token array can have"));
  EXPECT_THAT(OpenError(NpyHeader(">u2", "(4,)") + ids),
              HasSubstr("dtype '>u2'"));
  EXPECT_THAT(OpenError(NpyHeader("<u2", "(2, 2)") + ids),
              HasSubstr("shape (2, 2) is not one dimension"));
  EXPECT_THAT(OpenError(NpyHeader("<u2", "()") + ids),
              HasSubstr("shape () is not one dimension"));
  EXPECT_THAT(OpenError(NpyHeader("<u2", "(4,)", 9) + ids),
              HasSubstr(".npy format version 9"));
  EXPECT_THAT(OpenError(NpyHeader("<u2", "(4,)").substr(0, 20)),
              HasSubstr("truncated .npy header"));
  const std::string path = absl::StrCat(directory_, "/absent.npy");
  absl::StatusOr<std::unique_ptr<TokenArray>> absent =
      TokenArray::Open(path, 0);
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.status().message(), HasSubstr(path));
  EXPECT_EQ(TokenArray::Open(path, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::engine
