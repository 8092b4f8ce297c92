#include "common/network_address.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace plateau {
namespace {

TEST(SplitHostPortTest, SplitsNamesAndAddresses) {
  const absl::StatusOr<HostPort> name = SplitHostPort("plateaud:7070");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->host, "plateaud");
  EXPECT_EQ(name->port, "7070");
  const absl::StatusOr<HostPort> ipv6 = SplitHostPort("[::1]:7070");
  ASSERT_TRUE(ipv6.ok()) << ipv6.status();
  EXPECT_EQ(ipv6->host, "::1");
  const absl::StatusOr<HostPort> every = SplitHostPort(":7070");
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_EQ(every->host, "");
}

TEST(SplitHostPortTest, AnAddressWithoutAPortIsNamed) {
  for (const char* bad : {"plateaud", "plateaud:"}) {
    const absl::StatusOr<HostPort> split = SplitHostPort(bad);
    ASSERT_TRUE(absl::IsInvalidArgument(split.status())) << bad;
    EXPECT_TRUE(absl::StrContains(split.status().message(), bad));
  }
}

TEST(IsLoopbackAddressTest, LoopbackAddressesAndUnixSockets) {
  for (const char* address : {"127.0.0.1:7070", "127.3.2.1:1", "[::1]:7070",
                              "localhost:7070", "unix:/run/plateaud.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
}

// Resolving these sends nothing: they are literals, or no name at all.
TEST(IsLoopbackAddressTest, EveryOtherAddressMayCrossANetwork) {
  for (const char* address :
       {"192.0.2.1:7070", "10.0.0.1:7070", "[2001:db8::1]:7070", "0.0.0.0:7070",
        "[::]:7070", ":7070", "127.0.0.1", "[::ffff:192.0.2.1]:7070"}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
  EXPECT_TRUE(IsLoopbackAddress("[::ffff:127.0.0.1]:7070"));
}

}  // namespace
}  // namespace plateau
