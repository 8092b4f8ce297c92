// gRPC addresses as the binaries take them in flags: "host:port", with host
// a name, an IPv4 address or a bracketed IPv6 one, or "unix:PATH". What a
// caller needs to know of one before it sends a secret to it: whether it
// reaches only this machine.
#ifndef PLATEAU_COMMON_NETWORK_ADDRESS_H_
#define PLATEAU_COMMON_NETWORK_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace plateau {

struct HostPort {
  std::string host;  // without brackets; "" for every interface (":7070")
  std::string port;
};

// INVALID_ARGUMENT naming the address when it has no ":port".
absl::StatusOr<HostPort> SplitHostPort(const std::string& address);

// True for a unix socket and for a host every one of whose resolved
// addresses is loopback (127.0.0.0/8, ::1). False for every interface
// ("0.0.0.0", "[::]", ""), for a host that does not resolve, and for one
// that resolves to any other address: a bearer token sent there in
// plaintext may cross a network.
bool IsLoopbackAddress(const std::string& address);

}  // namespace plateau

#endif  // PLATEAU_COMMON_NETWORK_ADDRESS_H_
