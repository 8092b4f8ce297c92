// plateaud: the coordinator daemon (docs/ARCHITECTURE.md sections 3 and 6).
#include <csignal>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "common/mutex_settings.h"
#include "daemon/server/daemon_server.h"
#include "daemon/service/auth.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070", "gRPC address");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9400",
          "Prometheus /metrics address");
ABSL_FLAG(std::string, data_dir, "plateaud-data",
          "RocksDB directory: jobs, events, nodes");
ABSL_FLAG(std::string, store_headroom, "64MiB",
          "writes are refused (RESOURCE_EXHAUSTED; reads go on) while the "
          "disk under --data_dir has less free than the store's size (which "
          "a compaction may rewrite) plus this, room for its memtables' "
          "flushes: RocksDB never meets a full disk");
ABSL_FLAG(std::string, store_max_size, "0",
          "the most the store's tables and memtables may hold, "
          "--store_headroom included (its log and manifest aside); 0: only "
          "the disk's free space bounds it");
ABSL_FLAG(absl::Duration, node_timeout, absl::Seconds(30),
          "a node silent this long is lost and its attempts end");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(2),
          "how often workers send heartbeats");
ABSL_FLAG(absl::Duration, rank_lease, absl::ZeroDuration(),
          "how long a node's ranks go on training after plateaud last "
          "acknowledged its heartbeat (plateaud restarts must fit in it); "
          "between two heartbeat intervals and 3/4 of --node_timeout; 0 "
          "means 3/4 of --node_timeout");
ABSL_FLAG(absl::Duration, stop_grace_period, absl::Seconds(30),
          "how long ranks get to stop (SIGTERM, then SIGKILL)");
ABSL_FLAG(double, checkpoint_write_bytes_per_second, 1e9,
          "how fast a node writes checkpoint files, for the write times "
          "`plateau plan` shows and warns of");
ABSL_FLAG(std::string, tokens_file, "",
          "users, roles and token hashes (YAML); empty turns auth off");
ABSL_FLAG(std::string, tls_cert, "", "server certificate (PEM)");
ABSL_FLAG(std::string, tls_key, "", "server private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "CA for optional worker client certificates (PEM)");
ABSL_FLAG(bool, allow_plaintext_tokens, false,
          "accept bearer tokens without TLS on a --listen address that is "
          "not loopback (a network you trust); refused otherwise");
ABSL_FLAG(bool, insecure_no_auth, false,
          "run without --tokens_file on a --listen or --metrics_listen "
          "address that is not loopback: every caller acts as the admin "
          "'local' and any agent may attach as any node; refused otherwise");
ABSL_FLAG(int32_t, default_quota_devices, 0,
          "devices a user may hold at once unless the tokens file says "
          "otherwise; 0 is unlimited");
ABSL_FLAG(int32_t, max_active_jobs_per_user, 1000,
          "jobs one user may have that have not ended (queued, running, "
          "stopping); a submission beyond is refused; 0 is unlimited");
ABSL_FLAG(int32_t, keep_ended_jobs, 1000,
          "ended jobs kept per user (record, log and progress); older ones "
          "are deleted; 0 keeps all");
ABSL_FLAG(absl::Duration, keep_ended_for, absl::Hours(24 * 30),
          "ended jobs older than this are deleted (record, log and "
          "progress); 0 keeps them");
ABSL_FLAG(absl::Duration, fair_share_half_life, absl::Hours(24 * 7),
          "half-life of each user's use for fair share: among jobs of equal "
          "priority, the user furthest below their share (the tokens file's "
          "`share`, default 1) goes first; 0 turns it off");
ABSL_FLAG(int32_t, preemption_priority_gap, 0,
          "a job that cannot start may preempt running jobs at least this "
          "much lower in priority (they checkpoint at the next step "
          "boundary and are requeued without using a restart); 0 turns "
          "preemption off");
ABSL_FLAG(int32_t, plans_per_user, 1,
          "memory plans plateaud makes at once for one user (at submit and "
          "for `plateau plan`); a user's others wait their turn, other "
          "users' do not; at least 1");
ABSL_FLAG(int32_t, max_preemptions_per_hour, 2,
          "no job is preempted for another more often than this in any "
          "hour; at least 1");
ABSL_FLAG(int32_t, max_user_priority, 100,
          "the highest job priority a user may ask for, unless the tokens "
          "file sets the user's max_priority; admins may use up to 1000");
ABSL_FLAG(std::vector<std::string>, read_roots, {},
          "absolute directories every user's jobs may read data.path and "
          "init_from from, beside data/ and models/ of the workers' work "
          "directories (the tokens file adds per-user ones); comma-separated");
ABSL_FLAG(std::string, node_shapes, "",
          "the kinds of node the cluster has or will have, as "
          "DEVICESxMEMORY entries (8x80GiB,4x24GiB): a job that fits none "
          "is refused at submit, and jobs are planned for them before such "
          "a node attaches; empty: only attached nodes count");
ABSL_FLAG(bool, hash_token, false,
          "read a token from stdin and print its token_sha256 for the tokens "
          "file, then exit (the token never appears on a command line)");

namespace {

void WaitForTermination() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  int received = 0;
  sigwait(&signals, &received);
}

// Parses a byte-size flag into `bytes`; false after saying what was wrong.
bool ParseSizeFlag(const char* name, const std::string& text, int64_t& bytes) {
  absl::StatusOr<int64_t> parsed = plateau::ParseByteSize(text);
  if (!parsed.ok()) {
    std::cerr << "plateaud: --" << name << ": " << parsed.status().message()
              << "\n";
    return false;
  }
  bytes = *parsed;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("plateaud [flags]: the Plateau coordinator");
  // Every thread inherits the blocked signals; WaitForTermination takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::ParseCommandLine(argc, argv);
  plateau::DisableMutexDeadlockDetection();
  if (absl::GetFlag(FLAGS_hash_token)) {
    std::string token((std::istreambuf_iterator<char>(std::cin)),
                      std::istreambuf_iterator<char>());
    // `openssl rand -hex 32` and `echo` end the token with a newline.
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) {
      token.pop_back();
    }
    if (token.empty()) {
      std::cerr << "plateaud: --hash_token reads the token from stdin, and "
                   "there was none (try: plateaud --hash_token < token-file)\n";
      return 2;
    }
    std::cout << plateau::daemon::TokenHash(token) << "\n";
    return 0;
  }
  plateau::daemon::DaemonConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (!ParseSizeFlag("store_headroom", absl::GetFlag(FLAGS_store_headroom),
                     config.store_headroom_bytes) ||
      !ParseSizeFlag("store_max_size", absl::GetFlag(FLAGS_store_max_size),
                     config.store_max_bytes)) {
    return 2;
  }
  config.node_timeout = absl::GetFlag(FLAGS_node_timeout);
  config.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  config.rank_lease = absl::GetFlag(FLAGS_rank_lease);
  config.stop_grace_period = absl::GetFlag(FLAGS_stop_grace_period);
  config.checkpoint_write_bytes_per_second =
      absl::GetFlag(FLAGS_checkpoint_write_bytes_per_second);
  config.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  config.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  config.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  config.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  config.allow_plaintext_tokens = absl::GetFlag(FLAGS_allow_plaintext_tokens);
  config.insecure_no_auth = absl::GetFlag(FLAGS_insecure_no_auth);
  config.default_quota_devices = absl::GetFlag(FLAGS_default_quota_devices);
  config.max_active_jobs_per_user =
      absl::GetFlag(FLAGS_max_active_jobs_per_user);
  config.keep_ended_jobs_per_user = absl::GetFlag(FLAGS_keep_ended_jobs);
  config.keep_ended_for = absl::GetFlag(FLAGS_keep_ended_for);
  config.fair_share_half_life = absl::GetFlag(FLAGS_fair_share_half_life);
  config.preemption_priority_gap = absl::GetFlag(FLAGS_preemption_priority_gap);
  config.max_preemptions_per_hour =
      absl::GetFlag(FLAGS_max_preemptions_per_hour);
  config.plans_per_user = absl::GetFlag(FLAGS_plans_per_user);
  config.node_shapes = absl::GetFlag(FLAGS_node_shapes);
  config.read_roots = absl::GetFlag(FLAGS_read_roots);
  config.max_user_priority = absl::GetFlag(FLAGS_max_user_priority);

  auto server = plateau::daemon::DaemonServer::Start(config);
  if (!server.ok()) {
    std::cerr << "plateaud: " << server.status().message() << "\n";
    return 1;
  }
  std::cout << "plateaud: gRPC on port " << (*server)->port()
            << ", metrics on port " << (*server)->metrics_port()
            << ", state in " << config.data_dir << "\n";
  if (!(*server)->authenticator().enabled()) {
    std::cout << "plateaud: auth is off (no --tokens_file): single-user mode, "
                 "every caller acts as the admin 'local'\n";
  }
  std::cout.flush();
  WaitForTermination();
  std::cout << "plateaud: shutting down\n";
  (*server)->Shutdown();
  return 0;
}
