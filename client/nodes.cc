// `plateau nodes`.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/node_view.h"
#include "common/status_macros.h"

namespace plateau::client {

absl::StatusOr<int> RunNodes(Connection& connection,
                             const CommandOptions& options) {
  v1::ListNodesResponse response;
  const grpc::Status status = connection.stub().ListNodes(
      connection.NewContext().get(), v1::ListNodesRequest(), &response);
  if (!status.ok()) return connection.Error(status);
  if (options.output == OutputFormat::kJson) {
    ASSIGN_OR_RETURN(const std::string json, ToJson(response));
    std::cout << json;
  } else {
    std::cout << TerminalSafe(NodesTable(response.nodes(), absl::Now()));
  }
  return kExitOk;
}

absl::StatusOr<int> RunDrain(Connection& connection,
                             const CommandOptions& options,
                             const std::string& node, bool drain,
                             const std::string& reason, bool preempt) {
  v1::SetNodeDrainRequest request;
  request.set_node(node);
  request.set_drain(drain);
  request.set_reason(reason);
  request.set_preempt(preempt);
  v1::Node response;
  const grpc::Status status = connection.stub().SetNodeDrain(
      connection.NewContext().get(), request, &response);
  if (!status.ok()) return connection.Error(status);
  if (options.output == OutputFormat::kJson) {
    ASSIGN_OR_RETURN(const std::string json, ToJson(response));
    std::cout << json;
  } else {
    std::cout << TerminalSafe(
        absl::StrCat(response.name(), ": ", NodeStateCell(response), "\n"));
  }
  return kExitOk;
}

}  // namespace plateau::client
