#include "daemon/rendezvous/rendezvous_store.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

TEST(RendezvousStoreTest, KeysLiveInOpenScopes) {
  RendezvousStore store;
  EXPECT_EQ(store.Set("j-1/1", "rank0", "addr").code(),
            absl::StatusCode::kNotFound);
  store.OpenScope("j-1/1");
  ASSERT_TRUE(store.Set("j-1/1", "rank0", "addr").ok());
  EXPECT_EQ(store.Get("j-1/1", "rank0").value(), "addr");
  EXPECT_EQ(store.Get("j-1/1", "rank1").status().code(),
            absl::StatusCode::kNotFound);
  store.OpenScope("j-1/2");
  EXPECT_EQ(store.Get("j-1/2", "rank0").status().code(),
            absl::StatusCode::kNotFound);
  store.DropScope("j-1/1");
  EXPECT_EQ(store.Get("j-1/1", "rank0").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RendezvousStoreTest, WaitReturnsWhenEveryKeyIsSet) {
  RendezvousStore store;
  store.OpenScope("s");
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(store.Set("s", "a", "1").ok());
    ASSERT_TRUE(store.Set("s", "b", "2").ok());
  });
  EXPECT_TRUE(store.Wait("s", {"a", "b"}, absl::Seconds(10)).ok());
  setter.join();
}

TEST(RendezvousStoreTest, WaitTimesOutNamingTheMissingKeys) {
  RendezvousStore store;
  store.OpenScope("s");
  ASSERT_TRUE(store.Set("s", "a", "1").ok());
  const absl::Status status =
      store.Wait("s", {"a", "rank7"}, absl::Milliseconds(30));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("rank7"), std::string::npos) << status;
}

TEST(RendezvousStoreTest, DroppingTheScopeWakesWaiters) {
  RendezvousStore store;
  store.OpenScope("s");
  std::thread dropper([&] {
    absl::SleepFor(absl::Milliseconds(20));
    store.DropScope("s");
  });
  EXPECT_EQ(store.Wait("s", {"a"}, absl::Seconds(10)).code(),
            absl::StatusCode::kNotFound);
  dropper.join();
}

TEST(RendezvousStoreTest, AWaiterWhoseCallerWentAwayReturnsSoon) {
  RendezvousStore store;
  store.OpenScope("s");
  std::atomic<bool> gone{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(50));
    gone = true;
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(
      store.Wait("s", {"a"}, absl::Minutes(10), [&] { return gone.load(); })
          .code(),
      absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  canceller.join();
}

TEST(RendezvousStoreTest, ShutdownWakesWaitersAndFailsLaterWaits) {
  RendezvousStore store;
  store.OpenScope("s");
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(20));
    store.Shutdown();
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(store.Wait("s", {"a"}, absl::Minutes(10)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  stopper.join();
  EXPECT_EQ(store.Wait("s", {"a"}, absl::Minutes(10)).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace plateau::daemon
