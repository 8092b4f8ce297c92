// The gRPC channel from a worker (its agent and its ranks) to plateaud:
// TLS when a CA certificate is given (the server's certificate must chain to
// it), with the node's client certificate when it has one, plaintext
// otherwise (loopback and trusted networks only); and the address by which
// this host reaches plateaud, which its ranks listen on.
#ifndef PLATEAU_WORKER_AGENT_COORDINATOR_CHANNEL_H_
#define PLATEAU_WORKER_AGENT_COORDINATOR_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace plateau::worker {

// PEM file paths, each "" where unused.
struct CoordinatorTls {
  std::string ca_cert_path;  // "" for plaintext
  // The node's certificate and its key, both or neither; only with TLS.
  // plateaud (with --tls_client_ca) takes it for the node it names.
  std::string client_cert_path;
  std::string client_key_path;
};

// address "host:port". INVALID_ARGUMENT naming the flag for an unreadable
// file, a certificate without its key, or one without a CA certificate.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateCoordinatorChannel(
    const std::string& address, const CoordinatorTls& tls);

// The local IP address of this host's route to `address` ("host:port",
// host a name, an IPv4 address or a bracketed IPv6 one): a UDP socket is
// connected toward it (which sends nothing) and asked for its own address.
// 127.0.0.1 for a plateaud on loopback. Errors name the address.
absl::StatusOr<std::string> LocalAddressToward(const std::string& address);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_COORDINATOR_CHANNEL_H_
