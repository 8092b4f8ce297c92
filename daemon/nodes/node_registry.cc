#include "daemon/nodes/node_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "plan/planner.h"

namespace plateau::daemon {
namespace {

constexpr char kNodePrefix[] = "node/";
// "node-drained/<name>": present while the node is drained.
constexpr char kDrainedPrefix[] = "node-drained/";

std::string NodeKey(const std::string& name) {
  return absl::StrCat(kNodePrefix, name);
}

std::string DrainedKey(const std::string& name) {
  return absl::StrCat(kDrainedPrefix, name);
}

// The state a node shows: LOST wins over the drain flag.
v1::NodeState ShownState(bool lost, bool drained) {
  if (lost) return v1::NODE_STATE_LOST;
  return drained ? v1::NODE_STATE_DRAINING : v1::NODE_STATE_READY;
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
        // Records from before the flag existed say DRAINING instead.
        entry.drained = entry.node.state() == v1::NODE_STATE_DRAINING;
        // Counted from now: nodes get node_timeout to re-attach.
        entry.last_heartbeat = now;
        entry.last_heard = FromProto(entry.node.last_heartbeat());
        registry->nodes_[entry.node.name()] = std::move(entry);
        return true;
      }));
  RETURN_IF_ERROR(parse_status);
  RETURN_IF_ERROR(store->Scan(
      kDrainedPrefix, [&](absl::string_view key, absl::string_view) {
        auto found = registry->nodes_.find(
            std::string(key.substr(sizeof(kDrainedPrefix) - 1)));
        if (found != registry->nodes_.end()) {
          Entry& entry = found->second;
          entry.drained = true;
          entry.node.set_state(ShownState(
              entry.node.state() == v1::NODE_STATE_LOST, /*drained=*/true));
        }
        return true;
      }));
  registry->IndexCapacityLocked();
  return registry;
}

void NodeRegistry::IndexCapacityLocked() {
  capacity_by_count_.clear();
  for (const auto& [name, entry] : nodes_) {
    Capacity& largest = capacity_by_count_[entry.node.devices_size()];
    largest.device_memory_bytes = std::max(
        largest.device_memory_bytes, plan::NodeDeviceMemoryBytes(entry.node));
    largest.host_memory_bytes =
        std::max(largest.host_memory_bytes, entry.node.host_memory_bytes());
  }
}

bool NodeRegistry::HasNodes() const {
  absl::MutexLock lock(&mutex_);
  return !nodes_.empty();
}

int64_t NodeRegistry::LargestDeviceMemoryBytes(int min_devices) const {
  absl::MutexLock lock(&mutex_);
  int64_t largest = 0;
  for (auto it = capacity_by_count_.lower_bound(min_devices);
       it != capacity_by_count_.end(); ++it) {
    largest = std::max(largest, it->second.device_memory_bytes);
  }
  return largest;
}

int64_t NodeRegistry::LargestHostMemoryBytes(int min_devices) const {
  absl::MutexLock lock(&mutex_);
  int64_t largest = 0;
  for (auto it = capacity_by_count_.lower_bound(min_devices);
       it != capacity_by_count_.end(); ++it) {
    largest = std::max(largest, it->second.host_memory_bytes);
  }
  return largest;
}

absl::Status NodeRegistry::Persist(const v1::Node& node, bool drained) const {
  WriteBatch batch;
  batch.Put(NodeKey(node.name()), node.SerializeAsString());
  if (drained) {
    batch.Put(DrainedKey(node.name()), "");
  } else {
    batch.Delete(DrainedKey(node.name()));
  }
  return store_->Write(batch, {.sync = true});
}

absl::StatusOr<v1::Node> NodeRegistry::Attach(
    const v1::WorkerHello& hello, std::shared_ptr<NodeConnection> connection) {
  if (hello.node_name().empty()) {
    return absl::InvalidArgumentError("hello.node_name is empty");
  }
  absl::MutexLock write(&writes_);
  bool drained = false;
  std::string drain_reason;
  {
    absl::MutexLock lock(&mutex_);
    auto found = nodes_.find(hello.node_name());
    if (found != nodes_.end() && found->second.drained) {
      drained = true;
      drain_reason = found->second.node.drain_reason();
    }
  }
  v1::Node node;
  node.set_name(hello.node_name());
  node.set_state(ShownState(/*lost=*/false, drained));
  node.set_drain_reason(drain_reason);
  *node.mutable_devices() = hello.devices();
  for (v1::Device& device : *node.mutable_devices()) {
    device.clear_allocated_job_id();
  }
  node.set_host_memory_bytes(hello.host_memory_bytes());
  node.set_metrics_address(hello.metrics_address());
  node.set_worker_version(hello.worker_version());
  const absl::Time now = clock_();
  *node.mutable_last_heartbeat() = ToProto(now);
  RETURN_IF_ERROR(Persist(node, drained));
  std::shared_ptr<NodeConnection> replaced;
  {
    absl::MutexLock lock(&mutex_);
    Entry& entry = nodes_[node.name()];
    entry.node = node;
    entry.drained = drained;
    entry.last_heartbeat = now;
    entry.last_heard = now;
    replaced = std::exchange(entry.connection, std::move(connection));
    IndexCapacityLocked();
  }
  // The old stream is over (the worker opened a new one): end its handler.
  if (replaced != nullptr) replaced->Close();
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
  if (found == nodes_.end()) return;
  found->second.last_heartbeat = now;
  found->second.last_heard = now;
}

absl::StatusOr<std::vector<std::string>> NodeRegistry::ExpireSilentNodes() {
  absl::MutexLock write(&writes_);
  const absl::Time now = clock_();
  auto silent = [&](const Entry& entry) {
    return entry.node.state() != v1::NODE_STATE_LOST &&
           now - entry.last_heartbeat > node_timeout_;
  };
  std::vector<std::string> candidates;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [name, entry] : nodes_) {
      if (silent(entry)) candidates.push_back(name);
    }
  }
  std::vector<std::string> names;
  for (const std::string& name : candidates) {
    v1::Node node;
    bool drained = false;
    {
      // Checked again right before the write: a heartbeat may have come
      // since. (Attach and SetDrain wait for writes_.)
      absl::MutexLock lock(&mutex_);
      const Entry& entry = nodes_.at(name);
      if (!silent(entry)) continue;
      node = entry.node;
      drained = entry.drained;
    }
    node.set_state(v1::NODE_STATE_LOST);
    RETURN_IF_ERROR(Persist(node, drained));
    std::shared_ptr<NodeConnection> connection;
    {
      absl::MutexLock lock(&mutex_);
      Entry& entry = nodes_.at(name);
      entry.node = node;
      connection = std::move(entry.connection);
      entry.connection.reset();
    }
    // A worker that is alive but went silent holds its stream open; closing
    // it makes the worker re-attach, which is how a LOST node comes back.
    if (connection != nullptr) connection->Close();
    names.push_back(name);
  }
  return names;
}

absl::StatusOr<v1::Node> NodeRegistry::SetDrain(const std::string& name,
                                                bool drain,
                                                const std::string& reason) {
  absl::MutexLock write(&writes_);
  v1::Node node;
  {
    absl::MutexLock lock(&mutex_);
    auto found = nodes_.find(name);
    if (found == nodes_.end()) {
      return absl::NotFoundError(absl::StrCat("no node ", name));
    }
    node = found->second.node;
  }
  node.set_state(
      ShownState(node.state() == v1::NODE_STATE_LOST, /*drained=*/drain));
  node.set_drain_reason(drain ? reason : "");
  RETURN_IF_ERROR(Persist(node, drain));
  absl::MutexLock lock(&mutex_);
  Entry& entry = nodes_.at(name);
  entry.node = node;
  entry.drained = drain;
  return node;
}

std::vector<v1::Node> NodeRegistry::Nodes() const {
  std::vector<v1::Node> nodes;
  absl::MutexLock lock(&mutex_);
  for (const auto& [name, entry] : nodes_) nodes.push_back(Shown(entry));
  return nodes;
}

v1::Node NodeRegistry::Shown(const Entry& entry) {
  v1::Node node = entry.node;
  *node.mutable_last_heartbeat() = ToProto(entry.last_heard);
  return node;
}

std::optional<v1::Node> NodeRegistry::Find(const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  const auto entry = nodes_.find(name);
  if (entry == nodes_.end()) return std::nullopt;
  return Shown(entry->second);
}

std::map<std::string, std::string> NodeRegistry::DrainedNodes() const {
  std::map<std::string, std::string> drained;
  absl::MutexLock lock(&mutex_);
  for (const auto& [name, entry] : nodes_) {
    if (entry.drained) drained.emplace(name, entry.node.drain_reason());
  }
  return drained;
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

bool NodeRegistry::IsConnected(const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto found = nodes_.find(name);
  return found != nodes_.end() && found->second.connection != nullptr &&
         found->second.node.state() != v1::NODE_STATE_LOST;
}

std::set<std::string> NodeRegistry::LostNodes() const {
  std::set<std::string> lost;
  absl::MutexLock lock(&mutex_);
  for (const auto& [name, entry] : nodes_) {
    if (entry.node.state() == v1::NODE_STATE_LOST) lost.insert(name);
  }
  return lost;
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
  if (connection == nullptr) return false;
  if (connection->Send(message)) return true;
  // The stream is gone: stop offering the node work on it.
  {
    absl::MutexLock lock(&mutex_);
    auto found = nodes_.find(name);
    if (found != nodes_.end() && found->second.connection == connection) {
      found->second.connection.reset();
    }
  }
  connection->Close();
  return false;
}

}  // namespace plateau::daemon
