#include "worker/agent/coordinator_channel.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace plateau::worker {
namespace {

TEST(LocalAddressTowardTest, APlateaudOnLoopbackIsReachedFromLoopback) {
  const absl::StatusOr<std::string> address =
      LocalAddressToward("127.0.0.1:7070");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(*address, "127.0.0.1");
}

TEST(LocalAddressTowardTest, AnAddressWithoutAPortIsNamed) {
  for (const char* bad : {"plateaud", ":7070"}) {
    const absl::StatusOr<std::string> address = LocalAddressToward(bad);
    ASSERT_TRUE(absl::IsInvalidArgument(address.status())) << bad;
    EXPECT_TRUE(absl::StrContains(address.status().message(), bad));
  }
}

}  // namespace
}  // namespace plateau::worker
