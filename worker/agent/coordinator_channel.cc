#include "worker/agent/coordinator_channel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/network_address.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace plateau::worker {

namespace {

absl::StatusOr<std::string> ReadPem(absl::string_view flag,
                                    const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", text.status().message()));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateCoordinatorChannel(
    const std::string& address, const CoordinatorTls& tls) {
  const bool has_client_cert = !tls.client_cert_path.empty();
  if (has_client_cert != !tls.client_key_path.empty()) {
    return absl::InvalidArgumentError(
        "--client_cert and --client_key go together: give both or neither");
  }
  if (tls.ca_cert_path.empty()) {
    if (has_client_cert) {
      return absl::InvalidArgumentError(
          "--client_cert needs TLS: give --ca_cert, the CA certificate that "
          "signed plateaud's");
    }
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs,
                   ReadPem("ca_cert", tls.ca_cert_path));
  if (has_client_cert) {
    ASSIGN_OR_RETURN(options.pem_cert_chain,
                     ReadPem("client_cert", tls.client_cert_path));
    ASSIGN_OR_RETURN(options.pem_private_key,
                     ReadPem("client_key", tls.client_key_path));
  }
  return grpc::CreateChannel(address, grpc::SslCredentials(options));
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& address) {
  absl::StatusOr<HostPort> split = SplitHostPort(address);
  if (!split.ok()) return split.status();
  if (split->host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' names no host"));
  }
  const std::string& host = split->host;
  const std::string& port = split->port;
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", address, ": ", gai_strerror(resolved)));
  }
  std::string local;
  int last_errno = 0;
  for (const addrinfo* entry = found; entry != nullptr && local.empty();
       entry = entry->ai_next) {
    const int fd = socket(entry->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage name = {};
    socklen_t length = sizeof(name);
    char text[INET6_ADDRSTRLEN] = {};
    if (connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&name), &length) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&name), length, text,
                    sizeof(text), nullptr, 0, NI_NUMERICHOST) == 0) {
      local = text;
    } else {
      last_errno = errno;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (local.empty()) {
    return absl::UnavailableError(absl::StrCat("no route from this host to ",
                                               address, ": ",
                                               std::strerror(last_errno)));
  }
  return local;
}

}  // namespace plateau::worker
