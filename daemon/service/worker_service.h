// plateau.v1.WorkerService: the Attach stream of each plateau-worker. The
// first message must be a hello; the reply is an AttachAccepted, then start
// and stop commands as the coordinator issues them. Every message the worker
// sends counts as a heartbeat. A node principal attaches only under its own
// name (PERMISSION_DENIED otherwise); admins under any.
#ifndef PLATEAU_DAEMON_SERVICE_WORKER_SERVICE_H_
#define PLATEAU_DAEMON_SERVICE_WORKER_SERVICE_H_

#include "daemon/coordinator/coordinator.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/service/auth.h"
#include "proto/worker.grpc.pb.h"

namespace plateau::daemon {

class WorkerService final : public v1::WorkerService::Service {
 public:
  WorkerService(Coordinator* coordinator, const Authenticator* authenticator,
                DaemonMetrics* metrics)
      : coordinator_(coordinator),
        authenticator_(authenticator),
        metrics_(metrics) {}

  grpc::Status Attach(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>*
          stream) override;

 private:
  Coordinator* const coordinator_;
  const Authenticator* const authenticator_;
  DaemonMetrics* const metrics_;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SERVICE_WORKER_SERVICE_H_
