#include "daemon/service/auth.h"

#include <exception>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/read_roots.h"
#include "grpcpp/security/auth_context.h"
#include "yaml-cpp/yaml.h"

namespace plateau::daemon {
namespace {

constexpr char kBearer[] = "Bearer ";

bool IsHexSha256(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

constexpr char kReservedUserName[] = "node";

// Node names are host names as often as not: upper case is allowed too.
bool IsValidNodeName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

// The node a verified client certificate names, or "" when the peer
// presented none (or TLS is off).
std::string CertificateNodeName(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  for (const char* property :
       {"x509_common_name", "x509_subject_alternative_name"}) {
    const std::vector<grpc::string_ref> values =
        auth->FindPropertyValues(property);
    if (!values.empty()) return std::string(values[0].data(), values[0].size());
  }
  return "";
}

bool IsValidUserName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string TokenHash(const std::string& token) {
  return Sha256Hex(token.data(), token.size());
}

std::unique_ptr<Authenticator> Authenticator::Disabled() {
  return std::unique_ptr<Authenticator>(new Authenticator());
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::FromFile(
    const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::unique_ptr<Authenticator> authenticator(new Authenticator());
  authenticator->enabled_ = true;
  auto error = [&](const std::string& where, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", where, ": ", what));
  };
  try {
    const YAML::Node root = YAML::Load(*text);
    if (!root.IsMap()) return error("file", "expected a map with users/nodes");
    for (const auto& entry : root) {
      const std::string key = entry.first.as<std::string>();
      if (key != "users" && key != "nodes") {
        return error(key, "unknown key; expected users or nodes");
      }
    }
    const YAML::Node users = root["users"];
    for (size_t i = 0; users && i < users.size(); ++i) {
      const std::string where = absl::StrCat("users[", i, "]");
      const YAML::Node user = users[i];
      Principal principal;
      principal.name = user["name"] ? user["name"].as<std::string>() : "";
      if (!IsValidUserName(principal.name)) {
        return error(where + ".name",
                     "1-63 characters of a-z, 0-9, '-', '_' or '.'");
      }
      if (principal.name == kReservedUserName) {
        return error(where + ".name", "'node' is reserved");
      }
      const std::string role =
          user["role"] ? user["role"].as<std::string>() : "user";
      if (role == "admin") {
        principal.role = Role::kAdmin;
      } else if (role == "metrics") {
        principal.role = Role::kMetrics;
      } else if (role != "user") {
        return error(where + ".role", "expected user, admin or metrics");
      }
      const std::string hash =
          user["token_sha256"] ? user["token_sha256"].as<std::string>() : "";
      if (!IsHexSha256(hash)) {
        return error(where + ".token_sha256",
                     "expected 64 lower-case hex digits");
      }
      if (user["max_priority"]) {
        const int max_priority = user["max_priority"].as<int>();
        if (max_priority < 0 || max_priority > 1000) {
          return error(where + ".max_priority", "must be in 0..1000");
        }
        authenticator->max_priority_[principal.name] = max_priority;
      }
      if (user["share"]) {
        const double share = user["share"].as<double>();
        if (!(share > 0 && share <= 1e6)) {
          return error(where + ".share", "must be in (0, 1000000]");
        }
        authenticator->shares_[principal.name] = share;
      }
      if (user["read_roots"]) {
        const YAML::Node roots = user["read_roots"];
        if (!roots.IsSequence()) {
          return error(where + ".read_roots", "expected a list of directories");
        }
        std::vector<std::string>& declared =
            authenticator->read_roots_[principal.name];
        for (size_t j = 0; j < roots.size(); ++j) {
          const std::string root = roots[j].as<std::string>();
          const absl::Status valid = CheckDeclaredReadRoot(
              absl::StrCat(where, ".read_roots[", j, "]"), root);
          if (!valid.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(path, ": ", valid.message()));
          }
          declared.push_back(root);
        }
      }
      if (user["quota_devices"]) {
        const int quota = user["quota_devices"].as<int>();
        if (quota < 0) return error(where + ".quota_devices", "must be >= 0");
        authenticator->quota_devices_[principal.name] = quota;
      }
      if (!authenticator->principals_by_token_hash_.emplace(hash, principal)
               .second) {
        return error(where + ".token_sha256", "used twice");
      }
    }
    const YAML::Node nodes = root["nodes"];
    std::set<std::string> node_names;
    for (size_t i = 0; nodes && i < nodes.size(); ++i) {
      const std::string where = absl::StrCat("nodes[", i, "]");
      const YAML::Node node = nodes[i];
      // A node token is good for one node only: the name its worker
      // attaches as.
      const std::string name =
          node["name"] ? node["name"].as<std::string>() : "";
      if (!IsValidNodeName(name)) {
        return error(where + ".name",
                     "the node's name: 1-63 characters of a-z, A-Z, 0-9, "
                     "'-', '_' or '.'");
      }
      if (!node_names.insert(name).second) {
        return error(where + ".name", "used twice");
      }
      authenticator->node_names_.insert(name);
      // Without a token the node attaches by client certificate only.
      if (!node["token_sha256"]) continue;
      const std::string hash = node["token_sha256"].as<std::string>();
      if (!IsHexSha256(hash)) {
        return error(where + ".token_sha256",
                     "expected 64 lower-case hex digits");
      }
      if (!authenticator->principals_by_token_hash_
               .emplace(hash, Principal{name, Role::kNode})
               .second) {
        return error(where + ".token_sha256", "used twice");
      }
    }
  } catch (const std::exception& exception) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a valid tokens file: ", exception.what()));
  }
  return authenticator;
}

absl::StatusOr<Principal> Authenticator::Authenticate(
    const grpc::ServerContext& context) const {
  if (!enabled_) return Principal{"local", Role::kAdmin};
  const auto& metadata = context.client_metadata();
  auto found = metadata.find("authorization");
  if (found == metadata.end()) {
    const std::string node = CertificateNodeName(context);
    if (!node.empty() && !node_names_.count(node)) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the client certificate names node '", absl::CHexEscape(node),
          "', which the tokens file does not list under nodes"));
    }
    if (!node.empty()) return Principal{node, Role::kNode};
    return absl::UnauthenticatedError(
        "no token: set PLATEAU_TOKEN or --token_file");
  }
  const std::string value(found->second.data(), found->second.size());
  if (!absl::StartsWith(value, kBearer)) {
    return absl::UnauthenticatedError(
        "authorization metadata must be 'Bearer <token>'");
  }
  return AuthenticateToken(value.substr(sizeof(kBearer) - 1));
}

absl::StatusOr<Principal> Authenticator::AuthenticateToken(
    const std::string& token) const {
  if (!enabled_) return Principal{"local", Role::kAdmin};
  auto principal = principals_by_token_hash_.find(TokenHash(token));
  if (principal == principals_by_token_hash_.end()) {
    return absl::UnauthenticatedError("unknown token");
  }
  return principal->second;
}

std::optional<int> Authenticator::MaxPriorityOf(const std::string& user) const {
  auto found = max_priority_.find(user);
  if (found == max_priority_.end()) return std::nullopt;
  return found->second;
}

absl::Status RequireRole(const Principal& principal,
                         std::initializer_list<Role> roles) {
  for (Role role : roles) {
    if (principal.role == role) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(principal.name, " may not call this method"));
}

}  // namespace plateau::daemon
