#include "daemon/rendezvous/rendezvous_store.h"

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

}  // namespace
}  // namespace plateau::daemon
