// The CLI's line to plateaud: one channel (TLS with the configured roots,
// else insecure), a Coordinator stub, per-call contexts carrying
// "authorization: Bearer <token>", and gRPC errors turned into messages a
// person can act on. Opening connects nothing; the first call does.
#ifndef PLATEAU_CLIENT_CONNECTION_H_
#define PLATEAU_CLIENT_CONNECTION_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/config.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "proto/coordinator.grpc.pb.h"

namespace plateau::client {

// Deadline of every unary call.
inline constexpr absl::Duration kCallTimeout = absl::Seconds(30);

class Connection {
 public:
  // Fails when the CA certificate file cannot be read, and when the token
  // would travel in plaintext to a non-loopback address
  // (CheckTokenTransport).
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const ClientConfig& config);

  v1::Coordinator::Stub& stub() { return *stub_; }
  const std::string& address() const { return address_; }

  // A context with the token and, when given, a deadline `timeout` from now
  // (streams that follow a job pass none).
  std::unique_ptr<grpc::ClientContext> NewContext(
      std::optional<absl::Duration> timeout = kCallTimeout) const;

  // The call's error as an absl::Status with the same code; UNAVAILABLE
  // says that plateaud cannot be reached at address(), UNAUTHENTICATED
  // points at PLATEAU_TOKEN / --token_file.
  absl::Status Error(const grpc::Status& status) const;

 private:
  Connection(std::string address, std::string token,
             std::shared_ptr<grpc::Channel> channel);

  const std::string address_;
  const std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

// NOT_FOUND from a call about one job becomes "no job <id>".
absl::Status JobError(const absl::Status& status, const std::string& job_id);

// The job as plateaud has it now (GetJob), errors as JobError gives them.
absl::StatusOr<v1::Job> FetchJob(Connection& connection,
                                 const std::string& job_id);

// Lets one thread end another's blocking stream: Cancel() calls TryCancel
// on the context registered now and on any registered later.
class CallCanceller {
 public:
  // `context` must stay alive until Unregister.
  void Register(grpc::ClientContext* context);
  void Unregister();
  void Cancel();
  bool cancelled() const;

 private:
  mutable absl::Mutex mutex_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mutex_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_CONNECTION_H_
