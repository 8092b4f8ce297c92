// plateaud assembled: the store under --data_dir, the job manager, node
// registry, rendezvous store, coordinator loop, the three gRPC services and
// the metrics endpoint, created in dependency order and shut down in
// reverse. main.cc parses flags into a DaemonConfig and runs one; tests run
// them in-process.
#ifndef PLATEAU_DAEMON_SERVER_DAEMON_SERVER_H_
#define PLATEAU_DAEMON_SERVER_DAEMON_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics_server.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/nodes/node_registry.h"
#include "daemon/rendezvous/rendezvous_store.h"
#include "daemon/service/auth.h"
#include "daemon/service/coordinator_service.h"
#include "daemon/service/rendezvous_service.h"
#include "daemon/service/worker_service.h"
#include "daemon/store/store.h"
#include "daemon/web/web_service.h"
#include "grpcpp/server.h"

namespace plateau::daemon {

struct DaemonConfig {
  std::string listen = "127.0.0.1:7070";  // port 0 picks a free one
  std::string metrics_listen = "127.0.0.1:9400";
  std::string data_dir = "plateaud-data";
  // The store's space guard (RocksDbStoreOptions): writes wait for this much
  // free under data_dir, and the store's files stay under the limit (0: none).
  int64_t store_headroom_bytes = int64_t{64} << 20;
  int64_t store_max_bytes = 0;
  absl::Duration node_timeout = absl::Seconds(30);
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // How long a node's ranks go on without plateaud acknowledging its
  // heartbeats (worker/agent/rank_lease.h). Zero: 3/4 of node_timeout. At
  // least two heartbeat intervals and at most 3/4 of node_timeout, so that a
  // cut-off node's ranks have stopped before its jobs are requeued.
  absl::Duration rank_lease = absl::ZeroDuration();
  absl::Duration scheduler_tick = absl::Milliseconds(500);
  std::string tokens_file;  // empty: auth off (single-user mode)
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;  // set: workers may present client certs
  // Auth without TLS on an address that is not loopback; refused otherwise.
  bool allow_plaintext_tokens = false;
  // No tokens file on an address that is not loopback (every caller the
  // admin "local", any agent any node); refused otherwise.
  bool insecure_no_auth = false;
  int default_quota_devices = 0;  // 0: unlimited
  // What one user keeps (JobLimits): jobs not ended, and ended jobs kept by
  // count and age before they are pruned.
  int max_active_jobs_per_user = 1000;
  int keep_ended_jobs_per_user = 1000;
  absl::Duration keep_ended_for = absl::Hours(24 * 30);
  // Fair share's half-life (CoordinatorOptions); zero turns it off.
  absl::Duration fair_share_half_life = absl::Hours(24 * 7);
  // Preemption (CoordinatorOptions); a zero gap turns it off.
  int preemption_priority_gap = 0;
  int max_preemptions_per_hour = 2;
  // Plans made at once for one user (CoordinatorOptions); at least 1.
  int plans_per_user = 1;
  // The highest priority a user's job may ask for, unless the tokens file
  // sets the user's max_priority; admins' are unbounded (auth.h).
  int max_user_priority = 100;
  // Absolute directories every user's jobs may read data and models from,
  // beside the work directory's data/ and models/ (common/read_roots.h).
  std::vector<std::string> read_roots;
  // The kinds of node the cluster has or will have, "8x80GiB,4x24GiB"
  // (admission.h's ParseNodeShapes); "": only attached nodes count.
  std::string node_shapes;
  // Ranks get this long to stop; a stop unconfirmed for stop_grace_period +
  // stop_margin is taken as done (see CoordinatorOptions).
  absl::Duration stop_grace_period = absl::Seconds(30);
  absl::Duration stop_margin = absl::Seconds(10);
  // A node's checkpoint write rate, for plans (plan::PlanOptions).
  double checkpoint_write_bytes_per_second = 1e9;
  // HTTP/2 keepalive pings on every connection, answered within the timeout
  // or the connection is closed: a half-open Attach stream (a worker whose
  // host vanished) ends instead of swallowing commands.
  absl::Duration keepalive_time = absl::Seconds(20);
  absl::Duration keepalive_timeout = absl::Seconds(10);
};

class DaemonServer {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonServer>> Start(
      const DaemonConfig& config);
  ~DaemonServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_->port(); }
  const Authenticator& authenticator() const { return *authenticator_; }
  Coordinator& coordinator() { return *coordinator_; }
  DaemonMetrics& metrics() { return *daemon_metrics_; }

  // Stops accepting RPCs, ends open streams, stops the loop.
  void Shutdown();
  // Blocks until Shutdown.
  void Wait();

 private:
  DaemonServer() = default;

  int port_ = 0;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<DaemonMetrics> daemon_metrics_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<NodeRegistry> nodes_;
  std::unique_ptr<RendezvousStore> rendezvous_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> coordinator_service_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<RendezvousService> rendezvous_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WebService> web_;
  std::unique_ptr<MetricsServer> metrics_;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SERVER_DAEMON_SERVER_H_
