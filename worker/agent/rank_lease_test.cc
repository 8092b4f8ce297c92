#include "worker/agent/rank_lease.h"

#include <atomic>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/test_files.h"
#include "gtest/gtest.h"

namespace plateau::worker {
namespace {

using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::WriteTestFile;

// What the watchdog reported, and when.
struct Expiry {
  absl::Mutex mutex;
  std::string why ABSL_GUARDED_BY(mutex);
  absl::Duration when ABSL_GUARDED_BY(mutex) = absl::InfiniteDuration();
  int calls ABSL_GUARDED_BY(mutex) = 0;

  RankLeaseWatchdog::ExpiredCallback Callback() {
    return [this](const std::string& text) {
      absl::MutexLock lock(&mutex);
      why = text;
      when = MonotonicNow();
      ++calls;
    };
  }
  bool Fired() {
    absl::MutexLock lock(&mutex);
    return calls > 0;
  }
};

TEST(RankLeaseTest, WritesAndReadsTheExpiry) {
  const std::string path = RankLeasePath(MakeTestDirectory("lease"));
  EXPECT_TRUE(absl::IsNotFound(ReadRankLease(path).status()));
  ASSERT_TRUE(WriteRankLease(path, absl::Nanoseconds(123456789012)).ok());
  ASSERT_TRUE(ReadRankLease(path).ok());
  EXPECT_EQ(*ReadRankLease(path), absl::Nanoseconds(123456789012));
  WriteTestFile(path, "expires at noon\n");
  EXPECT_TRUE(absl::IsDataLoss(ReadRankLease(path).status()));
}

TEST(RankLeaseTest, ARenewedLeaseKeepsTheRankAndALapsedOneEndsIt) {
  const std::string path = RankLeasePath(MakeTestDirectory("lease"));
  const absl::Duration lease = absl::Milliseconds(300);
  ASSERT_TRUE(WriteRankLease(path, MonotonicNow() + lease).ok());
  Expiry expiry;
  RankLeaseWatchdog watchdog(path, absl::Milliseconds(20), expiry.Callback());
  // Renewed for a while, as an agent in touch with plateaud does.
  const absl::Duration renewing_until = MonotonicNow() + absl::Seconds(1);
  absl::Duration last_expiry;
  while (MonotonicNow() < renewing_until) {
    last_expiry = MonotonicNow() + lease;
    ASSERT_TRUE(WriteRankLease(path, last_expiry).ok());
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_FALSE(expiry.Fired());
  // Then no more renewals: it fires once, soon after the expiry.
  while (!expiry.Fired()) absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(100));
  absl::MutexLock lock(&expiry.mutex);
  EXPECT_EQ(expiry.calls, 1);
  EXPECT_GE(expiry.when, last_expiry);
  EXPECT_LT(expiry.when, last_expiry + absl::Milliseconds(100));
  EXPECT_TRUE(absl::StrContains(expiry.why, "its lease expired")) << expiry.why;
}

TEST(RankLeaseTest, ALeaseThatCannotBeReadEndsTheRank) {
  const std::string path = RankLeasePath(MakeTestDirectory("lease"));
  Expiry expiry;
  RankLeaseWatchdog watchdog(path, absl::Milliseconds(20), expiry.Callback());
  while (!expiry.Fired()) absl::SleepFor(absl::Milliseconds(5));
  absl::MutexLock lock(&expiry.mutex);
  EXPECT_TRUE(absl::StrContains(expiry.why, "cannot be read")) << expiry.why;
}

TEST(RankLeaseTest, TheWatchdogStopsWithoutFiringWhenDestroyed) {
  const std::string path = RankLeasePath(MakeTestDirectory("lease"));
  ASSERT_TRUE(WriteRankLease(path, MonotonicNow() + absl::Hours(1)).ok());
  Expiry expiry;
  {
    RankLeaseWatchdog watchdog(path, absl::Seconds(10), expiry.Callback());
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_FALSE(expiry.Fired());
}

}  // namespace
}  // namespace plateau::worker
