#include "daemon/service/worker_service.h"

#include <memory>

#include "absl/synchronization/mutex.h"
#include "daemon/service/rpc_support.h"

namespace plateau::daemon {
namespace {

// Sends on an Attach stream from any thread. gRPC allows one writer at a time
// beside the reader; once the handler returns the stream is gone, so Close
// makes later sends fail instead of touching it.
class StreamConnection final : public NodeConnection {
 public:
  explicit StreamConnection(grpc::ServerReaderWriter<v1::CoordinatorMessage,
                                                     v1::WorkerMessage>* stream)
      : stream_(stream) {}

  bool Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock lock(&mutex_);
    return stream_ != nullptr && stream_->Write(message);
  }

  void Close() {
    absl::MutexLock lock(&mutex_);
    stream_ = nullptr;
  }

 private:
  absl::Mutex mutex_;
  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace

grpc::Status WorkerService::Attach(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>*
        stream) {
  RpcScope scope(metrics_, "Attach");
  absl::StatusOr<Principal> principal = authenticator_->Authenticate(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  absl::Status allowed = RequireRole(*principal, {Role::kNode, Role::kAdmin});
  if (!allowed.ok()) return scope.Finish(allowed);
  v1::WorkerMessage message;
  if (!stream->Read(&message)) return scope.Finish(absl::OkStatus());
  if (!message.has_hello()) {
    return scope.Finish(absl::InvalidArgumentError(
        "the first message on Attach must be a hello"));
  }
  const std::string node = message.hello().node_name();
  auto connection = std::make_shared<StreamConnection>(stream);
  const absl::Status attached =
      coordinator_->OnAttach(message.hello(), connection);
  if (!attached.ok()) {
    connection->Close();
    return scope.Finish(attached);
  }
  while (stream->Read(&message)) {
    coordinator_->OnWorkerMessage(node, message);
  }
  connection->Close();
  coordinator_->OnDetach(node, connection.get());
  return scope.Finish(absl::OkStatus());
}

}  // namespace plateau::daemon
