// Ranks rendezvous through a real plateaud (in process, on loopback) under
// the rendezvous key of a live job attempt, as ranks started by a worker do:
// two Gloo ranks connect through CoordinatorStore and reduce; a key that is
// not there, or a scope with no live attempt, is an error naming it.
#include "worker/rendezvous/coordinator_store.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/test_files.h"
#include "daemon/server/daemon_server.h"
#include "engine/parallel/gloo_communicator.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_client.h"
#include "tests/daemon/simulated_worker.h"

namespace plateau::worker {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);

class CoordinatorStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon::DaemonConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "127.0.0.1:0";
    config.data_dir = testing::MakeTestDirectory("plateaud") + "/data";
    config.scheduler_tick = absl::Milliseconds(50);
    auto server = daemon::DaemonServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    channel_ = testing::LocalChannel(server_->port());
    testing::SimulatedWorkerOptions options;
    options.name = "node-a";
    options.devices = 2;
    auto worker = testing::SimulatedWorker::Attach(channel_, options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(worker).value();
    auto stub = v1::Coordinator::NewStub(channel_);
    auto job =
        testing::Submit(*stub, testing::SpecYaml({.devices_per_node = 2}));
    ASSERT_TRUE(job.ok()) << job.status();
    auto start = worker_->WaitForStart(job->id(), kWait);
    ASSERT_TRUE(start.ok()) << start.status();
    scope_ = start->rendezvous_key();
  }

  std::shared_ptr<CoordinatorStore> Store(const std::string& scope,
                                          std::chrono::milliseconds timeout) {
    return std::make_shared<CoordinatorStore>(channel_, scope, "", timeout);
  }

  std::unique_ptr<daemon::DaemonServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<testing::SimulatedWorker> worker_;
  std::string scope_;  // the live attempt's rendezvous key
};

TEST_F(CoordinatorStoreTest, TwoRanksConnectAndReduceThroughPlateaud) {
  std::vector<float> sums(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto communicator = engine::GlooCommunicator::Create(
          Store(scope_, std::chrono::seconds(20)), "world", rank, 2,
          absl::Seconds(20));
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      float value = 1.0f + rank;
      ASSERT_TRUE((*communicator)->AllReduceSum(&value, 1).ok());
      sums[rank] = value;
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_EQ(sums, (std::vector<float>{3.0f, 3.0f}));
}

TEST_F(CoordinatorStoreTest, AMissingKeyTimesOutNamingIt) {
  auto store = Store(scope_, std::chrono::milliseconds(300));
  store->set("address", {'a', 'b', '\0', 'c'});
  EXPECT_EQ(store->get("address"), (std::vector<char>{'a', 'b', '\0', 'c'}));
  try {
    store->get("elsewhere");
    FAIL() << "a key nobody set was found";
  } catch (const gloo::IoException& error) {
    EXPECT_NE(
        std::string(error.what())
            .find("plateaud rendezvous Wait of 1 keys (first 'elsewhere')"),
        std::string::npos)
        << error.what();
  }
}

TEST_F(CoordinatorStoreTest, AScopeWithNoLiveAttemptIsRefused) {
  auto communicator = engine::GlooCommunicator::Create(
      Store(scope_ + "-stale", std::chrono::seconds(1)), "world", 0, 2,
      absl::Seconds(1));
  ASSERT_FALSE(communicator.ok());
  EXPECT_NE(communicator.status().message().find("no live attempt"),
            std::string::npos)
      << communicator.status();
}

}  // namespace
}  // namespace plateau::worker
