#include "worker/agent/coordinator_channel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace plateau::worker {

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateCoordinatorChannel(
    const std::string& address, const std::string& ca_cert_path) {
  if (ca_cert_path.empty()) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }
  absl::StatusOr<std::string> ca_cert = ReadFileToString(ca_cert_path);
  if (!ca_cert.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ca_cert: ", ca_cert.status().message()));
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = *ca_cert;
  return grpc::CreateChannel(address, grpc::SslCredentials(options));
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
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
