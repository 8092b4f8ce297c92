// Who is calling: bearer tokens from a tokens file (YAML), checked on every
// RPC when auth is on. Users (role user) see and cancel only their own jobs;
// admins everything; both use the Coordinator API. Nodes (workers and their
// ranks) attach, and use the rendezvous store, only as the node their token
// names; they may not call the Coordinator API. With auth off (no tokens
// file) every caller is the admin "local": the single-user mode of a
// workstation. A user's jobs may ask for a priority up to their
// max_priority (else plateaud's --max_user_priority); admins' up to any.
//
// Tokens file:
//   users:
//     - {name: ada, role: admin, token_sha256: <hex>, quota_devices: 16}
//     - {name: bob, role: user, token_sha256: <hex>, max_priority: 200,
//        share: 2, read_roots: [/datasets/bob]}
//   nodes:
//     - {name: node-a, token_sha256: <hex>}
//     - {name: node-b}    # attaches by client certificate only
// Only SHA-256 hashes of tokens are stored (`plateaud --hash_token` prints
// one). Clients send "authorization: Bearer <token>". The user name "node"
// is reserved.
//
// With TLS and --tls_client_ca, a caller that sends no token but presents a
// client certificate the CA signed is the node named by the certificate's
// common name (or, without one, its first subject alternative name), if the
// tokens file lists that node: a certificate of the CA naming anything
// else is refused.
#ifndef PLATEAU_DAEMON_SERVICE_AUTH_H_
#define PLATEAU_DAEMON_SERVICE_AUTH_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace plateau::daemon {

// kMetrics: a scraper (Prometheus), which may read plateaud's /metrics and
// /sd/workers and nothing else.
enum class Role { kUser, kAdmin, kNode, kMetrics };

struct Principal {
  std::string name;
  Role role = Role::kUser;

  bool CanSeeJobsOf(const std::string& owner) const {
    return role == Role::kAdmin || name == owner;
  }
};

class Authenticator {
 public:
  // Auth off: everyone is the admin "local".
  static std::unique_ptr<Authenticator> Disabled();
  // INVALID_ARGUMENT naming the file, entry and field for a bad tokens file.
  static absl::StatusOr<std::unique_ptr<Authenticator>> FromFile(
      const std::string& path);

  bool enabled() const { return enabled_; }
  // UNAUTHENTICATED for a missing or unknown token (and no verified client
  // certificate).
  absl::StatusOr<Principal> Authenticate(
      const grpc::ServerContext& context) const;
  // The principal a bare token names (for callers outside gRPC: the web
  // page); UNAUTHENTICATED for an unknown one.
  absl::StatusOr<Principal> AuthenticateToken(const std::string& token) const;
  // Per-user device quotas from the tokens file.
  const std::map<std::string, int>& quota_devices() const {
    return quota_devices_;
  }
  // Per-user fair shares from the tokens file (users without one have 1).
  const std::map<std::string, double>& shares() const { return shares_; }
  // The user's max_priority from the tokens file, if it sets one.
  std::optional<int> MaxPriorityOf(const std::string& user) const;
  // Per-user read roots from the tokens file (read_roots.h), absolute.
  const std::map<std::string, std::vector<std::string>>& read_roots() const {
    return read_roots_;
  }

 private:
  bool enabled_ = false;
  std::map<std::string, Principal> principals_by_token_hash_;
  std::map<std::string, int> quota_devices_;
  std::map<std::string, double> shares_;
  std::map<std::string, int> max_priority_;
  std::map<std::string, std::vector<std::string>> read_roots_;
  std::set<std::string> node_names_;  // the tokens file's nodes
};

// Lower-case hex SHA-256 of a token, as the tokens file stores it.
std::string TokenHash(const std::string& token);

// PERMISSION_DENIED unless the principal has one of the roles.
absl::Status RequireRole(const Principal& principal,
                         std::initializer_list<Role> roles);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SERVICE_AUTH_H_
