#include "daemon/nodes/node_registry.h"

#include <memory>
#include <string>
#include <vector>

#include "common/proto_time.h"
#include "daemon/store/memory_store.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

// Records what is sent; fails sends once told to.
class FakeConnection : public NodeConnection {
 public:
  bool Send(const v1::CoordinatorMessage& message) override {
    if (fail || closed) return false;
    sent.push_back(message);
    return true;
  }
  void Close() override { closed = true; }

  bool fail = false;
  bool closed = false;
  std::vector<v1::CoordinatorMessage> sent;
};

v1::WorkerHello Hello(const std::string& name) {
  v1::WorkerHello hello;
  hello.set_node_name(name);
  hello.add_devices()->set_index(0);
  return hello;
}

class NodeRegistryTest : public ::testing::Test {
 protected:
  NodeRegistryTest() { Reopen(); }

  // A fresh registry over the same store, as after a daemon restart.
  void Reopen() {
    registry_ = NodeRegistry::Open(
                    &store_, [this] { return now_; }, absl::Seconds(10))
                    .value();
  }

  std::shared_ptr<FakeConnection> Attach(const std::string& name) {
    auto connection = std::make_shared<FakeConnection>();
    EXPECT_TRUE(registry_->Attach(Hello(name), connection).ok());
    return connection;
  }

  v1::NodeState StateOf(const std::string& name) {
    for (const v1::Node& node : registry_->Nodes()) {
      if (node.name() == name) return node.state();
    }
    return v1::NODE_STATE_UNSPECIFIED;
  }

  std::vector<std::string> Schedulable() {
    std::vector<std::string> names;
    registry_->VisitSchedulableNodes(
        [&](const v1::Node& node) { names.push_back(node.name()); });
    return names;
  }

  MemoryStore store_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  std::unique_ptr<NodeRegistry> registry_;
};

TEST_F(NodeRegistryTest, DrainSurvivesLossReattachAndRestart) {
  Attach("a");
  const auto reason_of = [&](const std::string& name) {
    for (const v1::Node& node : registry_->Nodes()) {
      if (node.name() == name) return node.drain_reason();
    }
    return std::string("(no such node)");
  };
  auto drained = registry_->SetDrain("a", true, "new NIC");
  ASSERT_TRUE(drained.ok());
  EXPECT_EQ(drained->state(), v1::NODE_STATE_DRAINING);
  EXPECT_EQ(drained->drain_reason(), "new NIC");
  now_ += absl::Seconds(11);
  EXPECT_EQ(registry_->ExpireSilentNodes().value(),
            std::vector<std::string>{"a"});
  EXPECT_EQ(StateOf("a"), v1::NODE_STATE_LOST);
  EXPECT_EQ(reason_of("a"), "new NIC");
  Reopen();
  EXPECT_EQ(StateOf("a"), v1::NODE_STATE_LOST);
  Attach("a");
  EXPECT_EQ(StateOf("a"), v1::NODE_STATE_DRAINING);
  EXPECT_EQ(reason_of("a"), "new NIC");
  EXPECT_TRUE(Schedulable().empty());
  Reopen();
  EXPECT_EQ(StateOf("a"), v1::NODE_STATE_DRAINING);
  EXPECT_EQ(reason_of("a"), "new NIC");
  Attach("a");
  ASSERT_EQ(registry_->SetDrain("a", false)->state(), v1::NODE_STATE_READY);
  EXPECT_EQ(reason_of("a"), "");
  EXPECT_EQ(Schedulable(), std::vector<std::string>{"a"});
  Reopen();
  EXPECT_EQ(reason_of("a"), "");
}

TEST_F(NodeRegistryTest, ALostNodeCanBeDrainedAndComesBackDraining) {
  Attach("a");
  now_ += absl::Seconds(11);
  ASSERT_TRUE(registry_->ExpireSilentNodes().ok());
  auto drained = registry_->SetDrain("a", true);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(drained->state(), v1::NODE_STATE_LOST);
  Attach("a");
  EXPECT_EQ(StateOf("a"), v1::NODE_STATE_DRAINING);
  EXPECT_EQ(registry_->SetDrain("b", true).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(NodeRegistryTest, NodesShowTheirLastHeartbeat) {
  Attach("a");
  const absl::Time attached = now_;
  now_ += absl::Seconds(5);
  EXPECT_EQ(FromProto(registry_->Nodes()[0].last_heartbeat()), attached);
  registry_->Heartbeat("a");
  EXPECT_EQ(FromProto(registry_->Nodes()[0].last_heartbeat()), now_);
  EXPECT_EQ(FromProto(registry_->Find("a")->last_heartbeat()), now_);
  // After a restart, until it attaches again: when it was last heard of
  // then (its attach, the heartbeats not being written), not the restart.
  now_ += absl::Seconds(30);
  Reopen();
  EXPECT_EQ(FromProto(registry_->Find("a")->last_heartbeat()), attached);
}

TEST_F(NodeRegistryTest, ExpiryClosesTheStreamOfASilentNode) {
  auto connection = Attach("a");
  now_ += absl::Seconds(5);
  registry_->Heartbeat("a");
  now_ += absl::Seconds(9);  // 9 s since the heartbeat: not yet
  EXPECT_TRUE(registry_->ExpireSilentNodes()->empty());
  EXPECT_FALSE(connection->closed);
  now_ += absl::Seconds(2);
  EXPECT_EQ(registry_->ExpireSilentNodes().value(),
            std::vector<std::string>{"a"});
  EXPECT_TRUE(connection->closed);
  EXPECT_EQ(registry_->LostNodes(), std::set<std::string>{"a"});
  EXPECT_TRUE(Schedulable().empty());
  // Expired once only.
  EXPECT_TRUE(registry_->ExpireSilentNodes()->empty());
}

TEST_F(NodeRegistryTest, AFailedSendDropsTheConnection) {
  auto connection = Attach("a");
  v1::CoordinatorMessage message;
  message.mutable_stop()->set_reason("x");
  EXPECT_TRUE(registry_->Send("a", message));
  connection->fail = true;
  EXPECT_FALSE(registry_->Send("a", message));
  EXPECT_TRUE(connection->closed);
  EXPECT_TRUE(Schedulable().empty());
  EXPECT_EQ(StateOf("a"), v1::NODE_STATE_READY);  // lost only at the timeout
  // A new stream makes it schedulable again.
  auto again = Attach("a");
  EXPECT_TRUE(registry_->Send("a", message));
  EXPECT_EQ(Schedulable(), std::vector<std::string>{"a"});
}

TEST_F(NodeRegistryTest, AttachReplacesAndClosesTheOldConnection) {
  auto first = Attach("a");
  auto second = Attach("a");
  EXPECT_TRUE(first->closed);
  EXPECT_FALSE(second->closed);
  // The old stream's end does not detach the new one.
  registry_->Detach("a", first.get());
  EXPECT_EQ(Schedulable(), std::vector<std::string>{"a"});
  registry_->Detach("a", second.get());
  EXPECT_TRUE(Schedulable().empty());
}

v1::WorkerHello HelloWithMemory(const std::string& name, int devices,
                                int64_t memory_bytes,
                                int64_t host_memory_bytes = 0) {
  v1::WorkerHello hello;
  hello.set_node_name(name);
  hello.set_host_memory_bytes(host_memory_bytes);
  for (int i = 0; i < devices; ++i) {
    v1::Device* device = hello.add_devices();
    device->set_index(i);
    device->set_memory_bytes(memory_bytes);
  }
  return hello;
}

TEST_F(NodeRegistryTest, LargestDeviceMemoryIsOverNodesWithEnoughDevices) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_FALSE(registry_->HasNodes());
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(1), 0);
  auto connection = std::make_shared<FakeConnection>();
  ASSERT_TRUE(
      registry_->Attach(HelloWithMemory("one", 1, 80 * kGiB), connection).ok());
  ASSERT_TRUE(
      registry_->Attach(HelloWithMemory("four", 4, 16 * kGiB), connection)
          .ok());
  ASSERT_TRUE(
      registry_->Attach(HelloWithMemory("eight", 8, 8 * kGiB), connection)
          .ok());
  EXPECT_TRUE(registry_->HasNodes());
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(1), 80 * kGiB);
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(2), 16 * kGiB);
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(8), 8 * kGiB);
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(9), 0);
  // Lost nodes count; a node re-attaching with other devices replaces its
  // old ones; a restart reloads them.
  now_ += absl::Seconds(11);
  ASSERT_EQ(registry_->ExpireSilentNodes()->size(), 3u);
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(2), 16 * kGiB);
  ASSERT_TRUE(
      registry_->Attach(HelloWithMemory("four", 4, 4 * kGiB), connection).ok());
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(2), 8 * kGiB);
  Reopen();
  EXPECT_TRUE(registry_->HasNodes());
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(1), 80 * kGiB);
  EXPECT_EQ(registry_->LargestDeviceMemoryBytes(4), 8 * kGiB);
}

TEST_F(NodeRegistryTest, LargestHostMemoryIsOverNodesWithEnoughDevices) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(registry_->LargestHostMemoryBytes(1), 0);
  auto connection = std::make_shared<FakeConnection>();
  ASSERT_TRUE(registry_
                  ->Attach(HelloWithMemory("big", 1, 80 * kGiB, 2048 * kGiB),
                           connection)
                  .ok());
  ASSERT_TRUE(registry_
                  ->Attach(HelloWithMemory("wide", 8, 80 * kGiB, 512 * kGiB),
                           connection)
                  .ok());
  EXPECT_EQ(registry_->LargestHostMemoryBytes(1), 2048 * kGiB);
  EXPECT_EQ(registry_->LargestHostMemoryBytes(2), 512 * kGiB);
  EXPECT_EQ(registry_->LargestHostMemoryBytes(9), 0);
  Reopen();
  EXPECT_EQ(registry_->LargestHostMemoryBytes(8), 512 * kGiB);
}

}  // namespace
}  // namespace plateau::daemon
