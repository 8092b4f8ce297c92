// The `nodes` table: NAME, STATE (with a drained node's reason), DEVICES
// (free/total and kind), DEVICE MEMORY (per device), HOST MEMORY, JOBS
// (distinct jobs on its devices), HEARTBEAT (age) and METRICS (address).
// Pure; the table ends in '\n'.
#ifndef PLATEAU_CLIENT_NODE_VIEW_H_
#define PLATEAU_CLIENT_NODE_VIEW_H_

#include <string>

#include "absl/time/time.h"
#include "google/protobuf/repeated_field.h"
#include "proto/node.pb.h"

namespace plateau::client {

// "READY", or "DRAINING (new NIC)" for a node drained with a reason.
std::string NodeStateCell(const v1::Node& node);

std::string NodesTable(
    const google::protobuf::RepeatedPtrField<v1::Node>& nodes, absl::Time now);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_NODE_VIEW_H_
