// plateau.v1.Rendezvous: the key-value store ranks bootstrap through, scoped
// per job attempt (see daemon/rendezvous/rendezvous_store.h). Nodes use only
// the scopes of live attempts with devices on them (PERMISSION_DENIED
// otherwise); admins any. A Wait ends early when its caller goes away or
// plateaud shuts down.
#ifndef PLATEAU_DAEMON_SERVICE_RENDEZVOUS_SERVICE_H_
#define PLATEAU_DAEMON_SERVICE_RENDEZVOUS_SERVICE_H_

#include <string>

#include "daemon/coordinator/coordinator.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/rendezvous/rendezvous_store.h"
#include "daemon/service/auth.h"
#include "proto/rendezvous.grpc.pb.h"

namespace plateau::daemon {

class RendezvousService final : public v1::Rendezvous::Service {
 public:
  RendezvousService(RendezvousStore* store, const Coordinator* coordinator,
                    const Authenticator* authenticator, DaemonMetrics* metrics)
      : store_(store),
        coordinator_(coordinator),
        authenticator_(authenticator),
        metrics_(metrics) {}

  grpc::Status Set(grpc::ServerContext* context,
                   const v1::RendezvousSetRequest* request,
                   v1::RendezvousSetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context,
                   const v1::RendezvousGetRequest* request,
                   v1::RendezvousGetResponse* response) override;
  grpc::Status Wait(grpc::ServerContext* context,
                    const v1::RendezvousWaitRequest* request,
                    v1::RendezvousWaitResponse* response) override;

 private:
  absl::Status Authorize(const grpc::ServerContext& context,
                         const std::string& scope) const;

  RendezvousStore* const store_;
  const Coordinator* const coordinator_;
  const Authenticator* const authenticator_;
  DaemonMetrics* const metrics_;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SERVICE_RENDEZVOUS_SERVICE_H_
