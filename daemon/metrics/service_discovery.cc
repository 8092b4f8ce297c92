#include "daemon/metrics/service_discovery.h"

#include "nlohmann/json.hpp"

namespace plateau::daemon {

std::string WorkerTargetsJson(const std::vector<v1::Node>& nodes) {
  nlohmann::json groups = nlohmann::json::array();
  for (const v1::Node& node : nodes) {
    if (node.state() == v1::NODE_STATE_LOST || node.metrics_address().empty()) {
      continue;
    }
    groups.push_back({{"targets", {node.metrics_address()}},
                      {"labels", {{"node", node.name()}}}});
  }
  return groups.dump();
}

}  // namespace plateau::daemon
