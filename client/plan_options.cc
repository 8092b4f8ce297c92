#include "client/plan_options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace plateau::client {

absl::StatusOr<plan::PlanOptions> ParsePlanFlags(const PlanFlags& flags) {
  plan::PlanOptions options;
  if (!flags.device_memory.empty()) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(flags.device_memory);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device_memory: ", bytes.status().message()));
    }
    if (*bytes <= 0) {
      return absl::InvalidArgumentError(
          "--device_memory must be more than 0 bytes");
    }
    options.device_memory_bytes = *bytes;
  }
  if (flags.devices < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--devices must be 0 (the spec's ep x pp x dp) or more, not ",
        flags.devices));
  }
  options.devices = flags.devices;
  if (flags.routing_skew.has_value() &&
      (!std::isfinite(*flags.routing_skew) || *flags.routing_skew < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--routing_skew must be at least 1 (the busiest expert's routed "
        "tokens over the mean expert's; 1 is uniform), not ",
        *flags.routing_skew));
  }
  options.routing_skew = flags.routing_skew;
  if (!(flags.margin >= 0.0 && flags.margin < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--margin must be a share of the device in [0, 1) (0.05 "
                     "keeps 5% free), not ",
                     flags.margin));
  }
  options.margin = flags.margin;
  return options;
}

int64_t LargestDeviceMemoryBytes(
    const google::protobuf::RepeatedPtrField<v1::Node>& nodes,
    std::string* node_name) {
  int64_t largest = 0;
  for (const v1::Node& node : nodes) {
    const int64_t bytes = plan::NodeDeviceMemoryBytes(node);
    if (bytes > largest) {
      largest = bytes;
      if (node_name != nullptr) *node_name = node.name();
    }
  }
  return largest;
}

}  // namespace plateau::client
