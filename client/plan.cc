// `plateau plan SPEC`.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/plan_options.h"
#include "client/plan_view.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "plan/precision_choice.h"
#include "proto/job_spec.h"

namespace plateau::client {
namespace {

absl::StatusOr<v1::ListNodesResponse> ListNodes(Connection& connection) {
  v1::ListNodesResponse response;
  const grpc::Status status = connection.stub().ListNodes(
      connection.NewContext().get(), v1::ListNodesRequest(), &response);
  if (!status.ok()) return connection.Error(status);
  return response;
}

// The largest per-device memory of plateaud's nodes, or why there is none.
absl::StatusOr<int64_t> DeviceMemoryOf(
    Connection& connection,
    const absl::StatusOr<v1::ListNodesResponse>& nodes) {
  if (!nodes.ok()) return nodes.status();
  const int64_t bytes = LargestDeviceMemoryBytes(nodes->nodes());
  if (bytes <= 0) {
    return absl::NotFoundError(absl::StrCat(
        "plateaud at ", connection.address(),
        nodes->nodes().empty() ? " has no nodes"
                               : " knows no node's device memory"));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<int> RunPlan(Connection& connection,
                            const CommandOptions& options,
                            const std::string& spec_path,
                            plan::PlanOptions plan_options) {
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpecFile(spec_path);
  if (absl::IsInvalidArgument(spec.status())) {
    // One "<file>: <field>: <reason>" line per problem.
    std::cerr << spec.status().message() << "\n";
    return kExitError;
  }
  if (!spec.ok()) return spec.status();
  const bool auto_precision = plan::IsAutoPrecision(*spec);
  // Asked only when needed: the plan is the client's own.
  const absl::StatusOr<v1::ListNodesResponse> nodes =
      plan_options.device_memory_bytes <= 0 || auto_precision
          ? ListNodes(connection)
          : absl::StatusOr<v1::ListNodesResponse>(v1::ListNodesResponse());
  if (plan_options.device_memory_bytes <= 0) {
    absl::StatusOr<int64_t> bytes = DeviceMemoryOf(connection, nodes);
    if (!bytes.ok()) {
      std::cerr << "plateau: no device memory to plan for: "
                << bytes.status().message()
                << "; give it with --device_memory (e.g. --device_memory "
                   "80GiB)\n";
      return kExitUsage;
    }
    plan_options.device_memory_bytes = *bytes;
  }
  // plateaud's, when it was asked: `plan` warns of a stop that would
  // outlast its grace.
  if (nodes.ok() && nodes->checkpoint_write_bytes_per_second() > 0) {
    plan_options.checkpoint_write_bytes_per_second =
        nodes->checkpoint_write_bytes_per_second();
    plan_options.stop_grace_seconds =
        static_cast<double>(
            google::protobuf::util::TimeUtil::DurationToNanoseconds(
                nodes->stop_grace_period())) /
        1e9;
  }
  const std::vector<v1::Node> cluster =
      nodes.ok()
          ? std::vector<v1::Node>(nodes->nodes().begin(), nodes->nodes().end())
          : std::vector<v1::Node>();
  ASSIGN_OR_RETURN(const plan::JobPlan planned,
                   plan::PlanForNodes(*spec, plan_options, cluster));
  if (options.output == OutputFormat::kJson) {
    ASSIGN_OR_RETURN(const std::string json,
                     PlanJson(planned.memory, planned.spec.schedules()));
    std::cout << json;
  } else {
    std::cout << TerminalSafe(PlanReport(spec->name(), planned.memory));
  }
  return planned.memory.fits() ? kExitOk : kExitError;
}

}  // namespace plateau::client
