#include "daemon/nodes/node_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"

namespace plateau::daemon {
namespace {

constexpr char kNodePrefix[] = "node/";

std::string NodeKey(const std::string& name) {
  return absl::StrCat(kNodePrefix, name);
}

}  // namespace

NodeRegistry::NodeRegistry(Store* store, Clock clock,
                           absl::Duration node_timeout)
    : store_(store), clock_(std::move(clock)), node_timeout_(node_timeout) {}

absl::StatusOr<std::unique_ptr<NodeRegistry>> NodeRegistry::Open(
    Store* store, Clock clock, absl::Duration node_timeout) {
  std::unique_ptr<NodeRegistry> registry(
      new NodeRegistry(store, std::move(clock), node_timeout));
  const absl::Time now = registry->clock_();
  absl::Status parse_status;
  absl::MutexLock lock(&registry->mutex_);
  RETURN_IF_ERROR(store->Scan(
      kNodePrefix, [&](absl::string_view key, absl::string_view value) {
        Entry entry;
        if (!entry.node.ParseFromArray(value.data(),
                                       static_cast<int>(value.size()))) {
          parse_status = absl::DataLossError(
              absl::StrCat("unreadable node record under key ", key));
          return false;
        }
        // Counted from now: nodes get node_timeout to re-attach.
        entry.last_heartbeat = now;
        registry->nodes_[entry.node.name()] = std::move(entry);
        return true;
      }));
  RETURN_IF_ERROR(parse_status);
  return registry;
}

absl::Status NodeRegistry::Persist(const v1::Node& node) const {
  WriteBatch batch;
  batch.Put(NodeKey(node.name()), node.SerializeAsString());
  return store_->Write(batch, {.sync = true});
}

absl::StatusOr<v1::Node> NodeRegistry::Attach(
    const v1::WorkerHello& hello, std::shared_ptr<NodeConnection> connection) {
  if (hello.node_name().empty()) {
    return absl::InvalidArgumentError("hello.node_name is empty");
  }
  v1::Node node;
  {
    absl::MutexLock lock(&mutex_);
    auto found = nodes_.find(hello.node_name());
    const bool draining = found != nodes_.end() &&
                          found->second.node.state() == v1::NODE_STATE_DRAINING;
    node.set_name(hello.node_name());
    node.set_state(draining ? v1::NODE_STATE_DRAINING : v1::NODE_STATE_READY);
    *node.mutable_devices() = hello.devices();
    for (v1::Device& device : *node.mutable_devices()) {
      device.clear_allocated_job_id();
    }
    node.set_host_memory_bytes(hello.host_memory_bytes());
    node.set_metrics_address(hello.metrics_address());
    node.set_worker_version(hello.worker_version());
  }
  const absl::Time now = clock_();
  *node.mutable_last_heartbeat() =
      google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
          absl::ToUnixNanos(now));
  RETURN_IF_ERROR(Persist(node));
  absl::MutexLock lock(&mutex_);
  Entry& entry = nodes_[node.name()];
  entry.node = node;
  entry.last_heartbeat = now;
  entry.connection = std::move(connection);
  return node;
}

void NodeRegistry::Detach(const std::string& name,
                          const NodeConnection* connection) {
  absl::MutexLock lock(&mutex_);
  auto found = nodes_.find(name);
  if (found != nodes_.end() && found->second.connection.get() == connection) {
    found->second.connection.reset();
  }
}

void NodeRegistry::Heartbeat(const std::string& name) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mutex_);
  auto found = nodes_.find(name);
  if (found != nodes_.end()) found->second.last_heartbeat = now;
}

absl::StatusOr<std::vector<std::string>> NodeRegistry::ExpireSilentNodes() {
  const absl::Time now = clock_();
  std::vector<v1::Node> expired;
  {
    absl::MutexLock lock(&mutex_);
    for (auto& [name, entry] : nodes_) {
      if (entry.node.state() != v1::NODE_STATE_LOST &&
          now - entry.last_heartbeat > node_timeout_) {
        v1::Node node = entry.node;
        node.set_state(v1::NODE_STATE_LOST);
        expired.push_back(std::move(node));
      }
    }
  }
  std::vector<std::string> names;
  for (const v1::Node& node : expired) {
    RETURN_IF_ERROR(Persist(node));
    absl::MutexLock lock(&mutex_);
    Entry& entry = nodes_[node.name()];
    // A node that re-attached meanwhile is not lost after all.
    if (now - entry.last_heartbeat <= node_timeout_) continue;
    entry.node = node;
    entry.connection.reset();
    names.push_back(node.name());
  }
  return names;
}

absl::StatusOr<v1::Node> NodeRegistry::SetDrain(const std::string& name,
                                                bool drain) {
  v1::Node node;
  {
    absl::MutexLock lock(&mutex_);
    auto found = nodes_.find(name);
    if (found == nodes_.end()) {
      return absl::NotFoundError(absl::StrCat("no node ", name));
    }
    node = found->second.node;
  }
  if (node.state() == v1::NODE_STATE_LOST) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", name,
                     " is lost; it can be drained once it "
                     "attaches again"));
  }
  node.set_state(drain ? v1::NODE_STATE_DRAINING : v1::NODE_STATE_READY);
  RETURN_IF_ERROR(Persist(node));
  absl::MutexLock lock(&mutex_);
  nodes_[name].node.set_state(node.state());
  return nodes_[name].node;
}

std::vector<v1::Node> NodeRegistry::Nodes() const {
  std::vector<v1::Node> nodes;
  absl::MutexLock lock(&mutex_);
  for (const auto& [name, entry] : nodes_) nodes.push_back(entry.node);
  return nodes;
}

void NodeRegistry::VisitSchedulableNodes(
    const std::function<void(const v1::Node&)>& visit) const {
  absl::MutexLock lock(&mutex_);
  for (const auto& [name, entry] : nodes_) {
    if (entry.node.state() == v1::NODE_STATE_READY && entry.connection) {
      visit(entry.node);
    }
  }
}

NodeRegistry::Counts NodeRegistry::CountByState() const {
  Counts counts;
  absl::MutexLock lock(&mutex_);
  for (const auto& [name, entry] : nodes_) {
    ++counts.nodes[entry.node.state()];
    counts.devices += entry.node.devices_size();
  }
  return counts;
}

bool NodeRegistry::IsLost(const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto found = nodes_.find(name);
  return found == nodes_.end() ||
         found->second.node.state() == v1::NODE_STATE_LOST;
}

bool NodeRegistry::Send(const std::string& name,
                        const v1::CoordinatorMessage& message) {
  std::shared_ptr<NodeConnection> connection;
  {
    absl::MutexLock lock(&mutex_);
    auto found = nodes_.find(name);
    if (found == nodes_.end()) return false;
    connection = found->second.connection;
  }
  return connection != nullptr && connection->Send(message);
}

}  // namespace plateau::daemon
