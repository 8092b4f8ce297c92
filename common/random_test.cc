#include "common/random.h"

#include "gtest/gtest.h"

namespace plateau {
namespace {

TEST(SplitMix64Test, MatchesReferenceValues) {
  // From the reference implementation (Vigna), state 0 and 1234567.
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(SplitMix64(1234567), 0x599ed017fb08fc85ULL);
}

}  // namespace
}  // namespace plateau
