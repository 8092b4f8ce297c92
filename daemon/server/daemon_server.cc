#include "daemon/server/daemon_server.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/network_address.h"
#include "common/read_roots.h"
#include "common/status_macros.h"
#include "daemon/metrics/service_discovery.h"
#include "daemon/store/rocksdb_store.h"
#include "grpc/grpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace plateau::daemon {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(
    const DaemonConfig& config) {
  if (config.tls_cert_file.empty() && config.tls_key_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (config.tls_cert_file.empty() || config.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert and --tls_key");
  }
  grpc::SslServerCredentialsOptions options;
  ASSIGN_OR_RETURN(std::string cert, ReadFileToString(config.tls_cert_file));
  ASSIGN_OR_RETURN(std::string key, ReadFileToString(config.tls_key_file));
  options.pem_key_cert_pairs.push_back({key, cert});
  if (!config.tls_client_ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadFileToString(config.tls_client_ca_file));
    // Client certificates are optional (users use tokens) but, when
    // presented, must chain to the CA.
    options.client_certificate_request =
        GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

// The lease granted to nodes: config.rank_lease, or 3/4 of the node
// timeout; checked to leave the margin docs/ARCHITECTURE.md section 3 needs.
absl::StatusOr<absl::Duration> RankLeaseOf(const DaemonConfig& config) {
  const absl::Duration longest = config.node_timeout * 3 / 4;
  const absl::Duration lease =
      config.rank_lease > absl::ZeroDuration() ? config.rank_lease : longest;
  if (config.rank_lease < absl::ZeroDuration() || lease > longest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank_lease ", absl::FormatDuration(config.rank_lease),
        " must be at most 3/4 of --node_timeout (",
        absl::FormatDuration(longest),
        "), so that a cut-off node's ranks stop before plateaud requeues "
        "their job"));
  }
  if (lease < 2 * config.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the rank lease (", absl::FormatDuration(lease),
        ") must be at least two heartbeat intervals (2 x ",
        absl::FormatDuration(config.heartbeat_interval),
        ") or one late heartbeat stops every rank; raise --node_timeout or "
        "--rank_lease, or lower --heartbeat_interval"));
  }
  return lease;
}

// Auth without TLS sends every token in the clear: allowed on loopback, and
// elsewhere only when the operator says the network is trusted.
absl::Status CheckTokenTransport(const DaemonConfig& config) {
  if (config.tokens_file.empty() || !config.tls_cert_file.empty() ||
      config.allow_plaintext_tokens || IsLoopbackAddress(config.listen)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--tokens_file without TLS on --listen=", config.listen,
      ", which is not a loopback address, would take tokens in plaintext "
      "from the network: give --tls_cert and --tls_key, listen on loopback, "
      "or pass --allow_plaintext_tokens on a network you trust"));
}

// Without a tokens file every caller is the admin "local" and any agent may
// attach as any node: allowed on loopback, and elsewhere only when the
// operator says so.
absl::Status CheckOpenAccess(const DaemonConfig& config) {
  if (!config.tokens_file.empty() || config.insecure_no_auth) {
    return absl::OkStatus();
  }
  const std::pair<const char*, std::string> addresses[] = {
      {"--listen", config.listen}, {"--metrics_listen", config.metrics_listen}};
  for (const auto& [flag, address] : addresses) {
    if (IsLoopbackAddress(address)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", address,
        " is not a loopback address and there is no --tokens_file: anyone "
        "who reaches it would act as the admin \"local\" and could attach "
        "an agent as any node. Give --tokens_file (deploy/README.md, \"TLS "
        "and tokens\"), listen on loopback, or pass --insecure_no_auth to "
        "run open anyway"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonServer>> DaemonServer::Start(
    const DaemonConfig& config) {
  RETURN_IF_ERROR(CheckOpenAccess(config));
  RETURN_IF_ERROR(CheckTokenTransport(config));
  for (const std::string& root : config.read_roots) {
    RETURN_IF_ERROR(CheckDeclaredReadRoot("--read_roots", root));
  }
  std::unique_ptr<DaemonServer> server(new DaemonServer());
  RocksDbStoreOptions store_options;
  store_options.headroom_bytes = config.store_headroom_bytes;
  store_options.max_store_bytes = config.store_max_bytes;
  ASSIGN_OR_RETURN(server->store_,
                   RocksDbStore::Open(config.data_dir, store_options));
  if (config.tokens_file.empty()) {
    server->authenticator_ = Authenticator::Disabled();
  } else {
    ASSIGN_OR_RETURN(server->authenticator_,
                     Authenticator::FromFile(config.tokens_file));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   Credentials(config));
  server->daemon_metrics_ = std::make_unique<DaemonMetrics>();
  const Clock clock = [] { return absl::Now(); };
  if (config.max_active_jobs_per_user < 0 ||
      config.keep_ended_jobs_per_user < 0 ||
      config.keep_ended_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--max_active_jobs_per_user, --keep_ended_jobs and --keep_ended_for "
        "must not be negative; 0 means no limit");
  }
  JobLimits job_limits;
  job_limits.max_active_jobs_per_user = config.max_active_jobs_per_user;
  job_limits.keep_ended_jobs_per_user = config.keep_ended_jobs_per_user;
  job_limits.keep_ended_for = config.keep_ended_for;
  ASSIGN_OR_RETURN(server->jobs_,
                   JobManager::Open(server->store_.get(), clock, job_limits));
  ASSIGN_OR_RETURN(
      server->nodes_,
      NodeRegistry::Open(server->store_.get(), clock, config.node_timeout));
  server->rendezvous_ = std::make_unique<RendezvousStore>();
  CoordinatorOptions options;
  options.heartbeat_interval = config.heartbeat_interval;
  ASSIGN_OR_RETURN(options.rank_lease, RankLeaseOf(config));
  options.tick = config.scheduler_tick;
  options.quota_devices = server->authenticator_->quota_devices();
  options.read_roots.cluster = config.read_roots;
  options.read_roots.per_user = server->authenticator_->read_roots();
  options.default_quota_devices = config.default_quota_devices;
  options.shares = server->authenticator_->shares();
  if (config.fair_share_half_life < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fair_share_half_life ",
                     absl::FormatDuration(config.fair_share_half_life),
                     " is negative; give 0 to turn fair share off"));
  }
  options.fair_share_half_life = config.fair_share_half_life;
  if (config.preemption_priority_gap < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--preemption_priority_gap ", config.preemption_priority_gap,
        " is negative; give 0 to turn preemption off"));
  }
  if (config.max_preemptions_per_hour < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_preemptions_per_hour ", config.max_preemptions_per_hour,
        " must be at least 1; give --preemption_priority_gap=0 to turn "
        "preemption off"));
  }
  options.preemption_priority_gap = config.preemption_priority_gap;
  options.max_preemptions_per_hour = config.max_preemptions_per_hour;
  if (config.plans_per_user < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plans_per_user ", config.plans_per_user, " must be at least 1"));
  }
  options.plans_per_user = config.plans_per_user;
  absl::StatusOr<std::vector<NodeShape>> shapes =
      ParseNodeShapes(config.node_shapes);
  if (!shapes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_shapes: ", shapes.status().message()));
  }
  options.node_shapes = *std::move(shapes);
  options.stop_grace_period = config.stop_grace_period;
  options.stop_margin = config.stop_margin;
  if (!(config.checkpoint_write_bytes_per_second > 0) ||
      !std::isfinite(config.checkpoint_write_bytes_per_second)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_write_bytes_per_second ",
                     config.checkpoint_write_bytes_per_second,
                     " must be a positive number of bytes a second"));
  }
  options.checkpoint_write_bytes_per_second =
      config.checkpoint_write_bytes_per_second;
  server->coordinator_ = std::make_unique<Coordinator>(
      server->jobs_.get(), server->nodes_.get(), server->rendezvous_.get(),
      server->daemon_metrics_.get(), server->store_.get(), clock, options);
  server->coordinator_service_ = std::make_unique<CoordinatorService>(
      server->coordinator_.get(), server->jobs_.get(),
      server->authenticator_.get(), server->daemon_metrics_.get(),
      config.max_user_priority);
  server->worker_service_ = std::make_unique<WorkerService>(
      server->coordinator_.get(), server->authenticator_.get(),
      server->daemon_metrics_.get());
  server->rendezvous_service_ = std::make_unique<RendezvousService>(
      server->rendezvous_.get(), server->coordinator_.get(),
      server->authenticator_.get(), server->daemon_metrics_.get());

  // With auth on, the series (per-user labels among them) and the workers'
  // addresses are for a scraper's token or an admin's.
  MetricsAuthorization scrapers;
  if (server->authenticator_->enabled()) {
    scrapers = [authenticator =
                    server->authenticator_.get()](const std::string& header) {
      constexpr absl::string_view kBearer = "Bearer ";
      if (!absl::StartsWith(header, kBearer)) return false;
      const absl::StatusOr<Principal> principal =
          authenticator->AuthenticateToken(header.substr(kBearer.size()));
      return principal.ok() && (principal->role == Role::kMetrics ||
                                principal->role == Role::kAdmin);
    };
  }
  ASSIGN_OR_RETURN(server->metrics_,
                   MetricsServer::Start(config.metrics_listen,
                                        server->daemon_metrics_->registry(),
                                        std::move(scrapers)));
  server->metrics_->AddJsonEndpoint(
      "/sd/workers", [coordinator = server->coordinator_.get()] {
        return WorkerTargetsJson(coordinator->ListNodes());
      });
  // The page has no TLS: tokens may reach it only where they may reach the
  // API without it.
  server->web_ = std::make_unique<WebService>(
      server->jobs_.get(), server->coordinator_.get(),
      server->authenticator_.get(),
      config.allow_plaintext_tokens || IsLoopbackAddress(config.metrics_listen),
      clock);
  server->web_->Register(server->metrics_.get());
  grpc::ServerBuilder builder;
  // A second plateaud on a taken port must fail, not share it (gRPC sets
  // SO_REUSEPORT by default): two daemons would split jobs and workers.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(config.listen, credentials, &server->port_);
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIME_MS,
      static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_time)));
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_timeout)));
  // Idle connections (a worker between commands) are checked too, and as
  // often as needed: not only while data flows.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Workers may keep their side alive the same way.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.RegisterService(server->coordinator_service_.get());
  builder.RegisterService(server->worker_service_.get());
  builder.RegisterService(server->rendezvous_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", config.listen));
  }
  server->coordinator_->Start();
  return server;
}

void DaemonServer::Shutdown() {
  // Rendezvous waits return now; open streams (watches, Attach) end at the
  // deadline instead of holding the shutdown.
  if (rendezvous_ != nullptr) rendezvous_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
  }
}

void DaemonServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

DaemonServer::~DaemonServer() {
  Shutdown();
  // The HTTP endpoint first: its pages read the coordinator and the jobs.
  metrics_.reset();
  // The coordinator (and its loop) goes before what it uses.
  coordinator_.reset();
}

}  // namespace plateau::daemon
