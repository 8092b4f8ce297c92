#include "common/network_address.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace plateau {
namespace {

bool IsLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* ipv4 = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(ipv4->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const auto* ipv6 = reinterpret_cast<const sockaddr_in6*>(address);
    return IN6_IS_ADDR_LOOPBACK(&ipv6->sin6_addr) ||
           (IN6_IS_ADDR_V4MAPPED(&ipv6->sin6_addr) &&
            ipv6->sin6_addr.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

absl::StatusOr<HostPort> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not host:port"));
  }
  HostPort split{address.substr(0, colon), address.substr(colon + 1)};
  if (split.host.size() >= 2 && split.host.front() == '[' &&
      split.host.back() == ']') {
    split.host = split.host.substr(1, split.host.size() - 2);
  }
  return split;
}

bool IsLoopbackAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return true;
  const absl::StatusOr<HostPort> split = SplitHostPort(address);
  if (!split.ok() || split->host.empty()) return false;
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(split->host.c_str(), nullptr, &hints, &found) != 0) {
    return false;
  }
  bool loopback = found != nullptr;
  for (const addrinfo* entry = found; entry != nullptr;
       entry = entry->ai_next) {
    loopback = loopback && IsLoopback(entry->ai_addr);
  }
  freeaddrinfo(found);
  return loopback;
}

}  // namespace plateau
