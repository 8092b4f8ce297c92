// `plateau nodes`.
#include <iostream>

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

}  // namespace plateau::client
