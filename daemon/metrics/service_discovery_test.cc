#include "daemon/metrics/service_discovery.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace plateau::daemon {
namespace {

v1::Node Node(const std::string& name, v1::NodeState state,
              const std::string& address) {
  v1::Node node;
  node.set_name(name);
  node.set_state(state);
  node.set_metrics_address(address);
  return node;
}

TEST(ServiceDiscoveryTest, ListsTheNodesThatCanBeScraped) {
  const nlohmann::json groups = nlohmann::json::parse(
      WorkerTargetsJson({Node("a", v1::NODE_STATE_READY, "10.0.0.1:9401"),
                         Node("b", v1::NODE_STATE_LOST, "10.0.0.2:9401"),
                         Node("c", v1::NODE_STATE_DRAINING, "10.0.0.3:9401"),
                         Node("d", v1::NODE_STATE_READY, "")}));
  EXPECT_EQ(groups, nlohmann::json::parse(R"([
      {"targets": ["10.0.0.1:9401"], "labels": {"node": "a"}},
      {"targets": ["10.0.0.3:9401"], "labels": {"node": "c"}}])"));
  EXPECT_EQ(WorkerTargetsJson({}), "[]");
}

}  // namespace
}  // namespace plateau::daemon
