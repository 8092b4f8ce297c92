// Glue every RPC handler uses: absl::Status to grpc::Status at the service
// edge, and the per-method request metrics.
#ifndef PLATEAU_DAEMON_SERVICE_RPC_SUPPORT_H_
#define PLATEAU_DAEMON_SERVICE_RPC_SUPPORT_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/metrics/daemon_metrics.h"
#include "grpcpp/support/status.h"

namespace plateau::daemon {

// The two enums share their numbering (both follow google.rpc.Code).
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

// Bounds on what a request may carry, checked at the service edge before
// anything is parsed, stored or echoed back: a job's record holds its spec
// and is rewritten with every progress update.
inline constexpr size_t kMaxSpecYamlBytes = size_t{64} << 10;
// Job ids, node names, owners, idempotency keys, page tokens.
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxReasonBytes = 1024;
inline constexpr int kMaxPageSize = 1000;
// ListJobs' pages end before this many bytes of rows: a quarter of gRPC's
// default 4 MiB a message, whatever the jobs hold.
inline constexpr int64_t kMaxListPageBytes = 1 << 20;

// INVALID_ARGUMENT naming `field` when `value` is longer than `max_bytes`.
inline absl::Status CheckFieldSize(absl::string_view field,
                                   absl::string_view value, size_t max_bytes) {
  if (value.size() <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", value.size(),
                                                 " bytes; at most ", max_bytes,
                                                 " are accepted"));
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
