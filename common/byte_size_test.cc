#include "common/byte_size.h"

#include "gtest/gtest.h"

namespace plateau {
namespace {

TEST(ByteSizeTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(ParseByteSize("2GiB").value(), int64_t{2} << 30);
  EXPECT_EQ(ParseByteSize("512MiB").value(), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("1.5GB").value(), 1500000000);
  EXPECT_EQ(ParseByteSize("4096").value(), 4096);
  EXPECT_EQ(ParseByteSize(" 8 kib ").value(), 8192);
  EXPECT_EQ(ParseByteSize("3g").value(), int64_t{3} << 30);
  EXPECT_EQ(ParseByteSize("0").value(), 0);
}

TEST(ByteSizeTest, RejectsWhatIsNotASize) {
  for (const char* bad :
       {"", "GiB", "two GiB", "-1GiB", "1.5.2MB", "nan", "1e30GiB"}) {
    const auto parsed = ParseByteSize(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ByteSizeTest, FormatsReadably) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.00 GiB");
}

}  // namespace
}  // namespace plateau
