// The worker nodes of the cluster: their records (devices, memory, drain
// state), persisted in the Store, and their live connections (one Attach
// stream each) with heartbeats. A node whose heartbeats stop for
// node_timeout is LOST until it attaches again; its stream, if still open,
// is closed then, so that a worker that is alive but was silent re-attaches.
// After a plateaud restart every known node starts unattached, so nodes that
// do not re-attach within node_timeout are lost too.
//
// Drain is a flag of its own, persisted beside the record: a drained node
// shows DRAINING whenever it is not LOST, across losses, re-attaches and
// restarts, until it is undrained. Only READY nodes with a live connection
// take new work.
//
// Which devices are allocated is not kept here: it follows from the live
// jobs' allocations (JobManager), the single source of truth.
//
// Thread-safe. Changes to a record (Attach, ExpireSilentNodes, SetDrain) are
// serialized: each reads, persists and applies under one lock.
#ifndef PLATEAU_DAEMON_NODES_NODE_REGISTRY_H_
#define PLATEAU_DAEMON_NODES_NODE_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/store/store.h"
#include "proto/node.pb.h"
#include "proto/worker.pb.h"

namespace plateau::daemon {

// The coordinator's end of one node's Attach stream.
class NodeConnection {
 public:
  virtual ~NodeConnection() = default;
  // Queues `message` for the node, in order; never waits for the network.
  // False when the connection is closed: the message will not be sent.
  virtual bool Send(const v1::CoordinatorMessage& message) = 0;
  // Ends the stream (the worker sees it end and re-attaches); later sends
  // fail. Idempotent; safe from any thread.
  virtual void Close() = 0;
  // The attempts whose start command Send accepted but the stream never
  // carried (it broke first). Meaningful once the stream has ended; each
  // attempt is returned once.
  virtual std::vector<v1::AttemptRef> TakeUnsentStarts() { return {}; }
};

class NodeRegistry {
 public:
  static absl::StatusOr<std::unique_ptr<NodeRegistry>> Open(
      Store* store, Clock clock, absl::Duration node_timeout);

  // Registers (or re-registers) a node from its hello; the node becomes
  // READY, or DRAINING if drained. Replaces (and closes) any previous
  // connection.
  absl::StatusOr<v1::Node> Attach(const v1::WorkerHello& hello,
                                  std::shared_ptr<NodeConnection> connection);
  // The stream ended; heartbeats stop, so the node is lost at the timeout
  // unless it re-attaches first. Ignored if `connection` was replaced.
  void Detach(const std::string& name, const NodeConnection* connection);
  void Heartbeat(const std::string& name);

  // Marks LOST (durably) every node whose last heartbeat is older than
  // node_timeout, and closes its stream; returns the names of the nodes that
  // became lost.
  absl::StatusOr<std::vector<std::string>> ExpireSilentNodes();

  // Drain (no new work) or undrain, lost nodes too (it applies when they
  // re-attach). A drained node keeps `reason` as Node.drain_reason, across
  // re-attaches and restarts; undrained, it has none. NOT_FOUND for an
  // unknown node.
  absl::StatusOr<v1::Node> SetDrain(const std::string& name, bool drain,
                                    const std::string& reason = "");

  // Every node, by name; Device.allocated_job_id is left empty.
  std::vector<v1::Node> Nodes() const;
  // The node of that name, likewise; nullopt for an unknown name.
  std::optional<v1::Node> Find(const std::string& name) const;
  // The drained nodes (lost ones too), each with its drain reason.
  std::map<std::string, std::string> DrainedNodes() const;
  // Calls visit for each READY, attached node, without copying; visit must
  // not call back into the registry.
  void VisitSchedulableNodes(
      const std::function<void(const v1::Node&)>& visit) const;
  // Nodes and their devices by node state, without copying records.
  struct Counts {
    std::map<v1::NodeState, int64_t> nodes;
    int64_t devices = 0;
  };
  Counts CountByState() const;
  bool IsLost(const std::string& name) const;
  // Whether the node has a live connection (attached, and not lost).
  bool IsConnected(const std::string& name) const;
  // Whether any node has ever registered (lost ones included).
  bool HasNodes() const;
  // The largest plan::NodeDeviceMemoryBytes among the nodes (any state) with at
  // least `min_devices` devices; 0 when none reports any. Without a scan: O(the
  // distinct device counts of the nodes).
  int64_t LargestDeviceMemoryBytes(int min_devices) const;
  // Likewise the largest host memory.
  int64_t LargestHostMemoryBytes(int min_devices) const;
  // The names of the LOST nodes.
  std::set<std::string> LostNodes() const;

  // Sends to the node's current connection; false if it has none. A failed
  // send drops (and closes) that connection: the node takes no new work
  // until it re-attaches.
  bool Send(const std::string& name, const v1::CoordinatorMessage& message);

  absl::Duration node_timeout() const { return node_timeout_; }

 private:
  NodeRegistry(Store* store, Clock clock, absl::Duration node_timeout);

  struct Entry {
    v1::Node node;
    bool drained = false;
    // The expiry clock: the last heartbeat, or plateaud's start for a node
    // that has not attached since (it gets node_timeout to re-attach).
    absl::Time last_heartbeat;
    // When the node was last heard from (attached or heartbeat), across
    // restarts: what Nodes and Find show as last_heartbeat. In memory only
    // between attaches: a heartbeat is not a write.
    absl::Time last_heard;
    std::shared_ptr<NodeConnection> connection;
  };

  // The node as callers see it: its record, last_heartbeat from last_heard.
  static v1::Node Shown(const Entry& entry);

  // The record and the drain flag, in one synced batch.
  absl::Status Persist(const v1::Node& node, bool drained) const;
  // Recomputes capacity_by_count_ from every node.
  void IndexCapacityLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  Store* const store_;
  const Clock clock_;
  const absl::Duration node_timeout_;
  // Held across a record change's read, durable write and apply.
  absl::Mutex writes_ ABSL_ACQUIRED_BEFORE(mutex_);
  mutable absl::Mutex mutex_;
  std::map<std::string, Entry> nodes_ ABSL_GUARDED_BY(mutex_);
  // Device count -> the largest plan::NodeDeviceMemoryBytes and host memory
  // of the nodes with that many devices. They change only when a node
  // attaches.
  struct Capacity {
    int64_t device_memory_bytes = 0;
    int64_t host_memory_bytes = 0;
  };
  std::map<int, Capacity> capacity_by_count_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_NODES_NODE_REGISTRY_H_
