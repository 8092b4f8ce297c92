// The options of `plateau plan` (planner.h's PlanOptions) from its flags,
// and the device memory to plan for from plateaud's nodes. Pure.
#ifndef PLATEAU_CLIENT_PLAN_OPTIONS_H_
#define PLATEAU_CLIENT_PLAN_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "plan/planner.h"
#include "proto/node.pb.h"

namespace plateau::client {

// The flags as given.
struct PlanFlags {
  std::string device_memory;           // a byte size; "": ask plateaud
  int devices = 0;                     // 0: the spec's ep x pp x dp
  std::optional<double> routing_skew;  // unset: the worst routing
  double margin = 0.05;
};

// INVALID_ARGUMENT (a usage error) naming the flag and what it accepts.
// device_memory_bytes is 0 when --device_memory was not given.
absl::StatusOr<plan::PlanOptions> ParsePlanFlags(const PlanFlags& flags);

// The largest plan::NodeDeviceMemoryBytes of `nodes`; 0 when none reports any.
// *node_name (if given) is set to that node's name.
int64_t LargestDeviceMemoryBytes(
    const google::protobuf::RepeatedPtrField<v1::Node>& nodes,
    std::string* node_name = nullptr);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_PLAN_OPTIONS_H_
