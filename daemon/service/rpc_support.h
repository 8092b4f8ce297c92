// Glue every RPC handler uses: absl::Status to grpc::Status at the service
// edge, and the per-method request metrics.
#ifndef PLATEAU_DAEMON_SERVICE_RPC_SUPPORT_H_
#define PLATEAU_DAEMON_SERVICE_RPC_SUPPORT_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "daemon/metrics/daemon_metrics.h"
#include "grpcpp/support/status.h"

namespace plateau::daemon {

// The two enums share their numbering (both follow google.rpc.Code).
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

// Times one RPC and records it under its method on Finish.
class RpcScope {
 public:
  RpcScope(DaemonMetrics* metrics, const char* method)
      : metrics_(metrics),
        method_(method),
        start_(std::chrono::steady_clock::now()) {}

  grpc::Status Finish(const absl::Status& status) {
    metrics_->RpcFinished(
        method_, absl::StatusCodeToString(status.code()),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count());
    return ToGrpcStatus(status);
  }

 private:
  DaemonMetrics* metrics_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SERVICE_RPC_SUPPORT_H_
