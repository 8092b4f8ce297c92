#include "client/node_view.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "common/byte_size.h"

namespace plateau::client {
namespace {

// "1/2 cpu": free of total, then the distinct kinds ("cpu+cuda").
std::string DevicesCell(const v1::Node& node) {
  int free = 0;
  std::set<std::string> kinds;
  for (const v1::Device& device : node.devices()) {
    if (!device.allocated()) ++free;
    kinds.insert(DeviceKindName(device.kind()));
  }
  std::string cell = absl::StrCat(free, "/", node.devices_size());
  if (!kinds.empty()) absl::StrAppend(&cell, " ", absl::StrJoin(kinds, "+"));
  return cell;
}

// The memory of one device ("2.00 GiB"), or each distinct size when the
// devices differ ("2.00 GiB,4.00 GiB").
std::string DeviceMemoryCell(const v1::Node& node) {
  std::set<int64_t> sizes;
  for (const v1::Device& device : node.devices()) {
    sizes.insert(device.memory_bytes());
  }
  if (sizes.empty()) return "-";
  std::vector<std::string> cells;
  for (int64_t bytes : sizes) cells.push_back(FormatBytes(bytes));
  return absl::StrJoin(cells, ",");
}

// The jobs on the node; devices of jobs the caller may not see count as
// "N other".
std::string JobsCell(const v1::Node& node) {
  std::set<std::string> jobs;
  int others = 0;
  for (const v1::Device& device : node.devices()) {
    if (!device.allocated_job_id().empty()) {
      jobs.insert(device.allocated_job_id());
    } else if (device.allocated()) {
      ++others;
    }
  }
  std::vector<std::string> cells(jobs.begin(), jobs.end());
  if (others > 0) cells.push_back(absl::StrCat(others, " other"));
  return cells.empty() ? "-" : absl::StrJoin(cells, ",");
}

}  // namespace

std::string NodeStateCell(const v1::Node& node) {
  if (node.drain_reason().empty()) return NodeStateName(node.state());
  return absl::StrCat(NodeStateName(node.state()), " (", node.drain_reason(),
                      ")");
}

std::string NodesTable(
    const google::protobuf::RepeatedPtrField<v1::Node>& nodes, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(nodes.size());
  for (const v1::Node& node : nodes) {
    rows.push_back(
        {node.name(), NodeStateCell(node), DevicesCell(node),
         DeviceMemoryCell(node),
         node.host_memory_bytes() > 0 ? FormatBytes(node.host_memory_bytes())
                                      : "-",
         JobsCell(node), AgeSince(node.last_heartbeat(), now),
         node.metrics_address().empty() ? "-" : node.metrics_address()});
  }
  return FormatTable({"NAME", "STATE", "DEVICES", "DEVICE MEMORY",
                      "HOST MEMORY", "JOBS", "HEARTBEAT", "METRICS"},
                     rows);
}

}  // namespace plateau::client
