#include "daemon/service/worker_service.h"

#include <deque>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/service/rpc_support.h"

namespace plateau::daemon {
namespace {

using AttachStream =
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>;

// A worker that lets this many commands pile up unread is stuck: its
// connection is closed rather than buffered without bound.
constexpr size_t kMaxQueuedMessages = 10'000;

// The coordinator's end of one Attach stream. Send only queues: a writer
// thread of its own carries the queue to the stream, so a worker that reads
// slowly (gRPC flow control) never blocks the caller, which holds the
// coordinator's lock. The handler that created it calls Finish before it
// returns; after that the stream is gone and nothing touches it.
class StreamConnection final : public NodeConnection {
 public:
  StreamConnection(grpc::ServerContext* context, AttachStream* stream)
      : context_(context), stream_(stream) {
    writer_ = std::thread([this] { WriteLoop(); });
  }

  ~StreamConnection() override { Finish(); }

  bool Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock lock(&mutex_);
    if (closed_) return false;
    if (queue_.size() >= kMaxQueuedMessages) {
      CloseLocked();
      return false;
    }
    queue_.push_back(message);
    return true;
  }

  void Close() override {
    absl::MutexLock lock(&mutex_);
    CloseLocked();
  }

  std::vector<v1::AttemptRef> TakeUnsentStarts() override {
    absl::MutexLock lock(&mutex_);
    return std::exchange(unsent_starts_, {});
  }

  // Ends the connection for good: no more sends; what was not written is
  // recorded as unsent; the writer is joined.
  void Finish() {
    {
      absl::MutexLock lock(&mutex_);
      if (finished_) return;
      // A write in progress may be waiting on a reader that is gone.
      if (writing_) context_->TryCancel();
      closed_ = true;
      DropQueueLocked();
    }
    writer_.join();
    absl::MutexLock lock(&mutex_);
    finished_ = true;
  }

 private:
  void WriteLoop() {
    while (true) {
      v1::CoordinatorMessage message;
      {
        absl::MutexLock lock(&mutex_);
        mutex_.Await(absl::Condition(
            +[](StreamConnection* self) {
              self->mutex_.AssertReaderHeld();
              return !self->queue_.empty() || self->closed_;
            },
            this));
        if (queue_.empty()) return;  // closed and nothing left
        message = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
      }
      const bool written = stream_->Write(message);
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      if (!written) {
        if (message.has_start()) {
          unsent_starts_.push_back(message.start().attempt());
        }
        CloseLocked();
        return;
      }
    }
  }

  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (finished_) return;
    if (!closed_) {
      closed_ = true;
      // Ends the handler's Read, and so the handler: the worker re-attaches.
      context_->TryCancel();
    }
    DropQueueLocked();
  }

  void DropQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    for (const v1::CoordinatorMessage& message : queue_) {
      if (message.has_start()) {
        unsent_starts_.push_back(message.start().attempt());
      }
    }
    queue_.clear();
  }

  grpc::ServerContext* const context_;
  AttachStream* const stream_;
  absl::Mutex mutex_;
  std::deque<v1::CoordinatorMessage> queue_ ABSL_GUARDED_BY(mutex_);
  std::vector<v1::AttemptRef> unsent_starts_ ABSL_GUARDED_BY(mutex_);
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;    // sends refused
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;   // in stream_->Write
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;  // the handler is done
  std::thread writer_;
};

}  // namespace

grpc::Status WorkerService::Attach(grpc::ServerContext* context,
                                   AttachStream* stream) {
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
  // A node's token (or certificate) is good for that node only.
  if (principal->role == Role::kNode && node != principal->name) {
    return scope.Finish(absl::PermissionDeniedError(absl::StrCat(
        "node ", principal->name, " may not attach as '", node, "'")));
  }
  // An admin may attach as any node, but not take over one that is attached:
  // only the node's own token or certificate may replace its connection (a
  // worker re-attaching before plateaud noticed its old stream broke).
  if (principal->role == Role::kAdmin && authenticator_->enabled() &&
      coordinator_->IsNodeAttached(node)) {
    return scope.Finish(absl::AlreadyExistsError(absl::StrCat(
        "node ", node,
        " is attached; only its own token or certificate may replace its "
        "connection")));
  }
  auto connection = std::make_shared<StreamConnection>(context, stream);
  const absl::Status attached =
      coordinator_->OnAttach(message.hello(), connection);
  if (attached.ok()) {
    while (stream->Read(&message)) {
      coordinator_->OnWorkerMessage(node, message);
      // Heard: the node's agent extends its ranks' lease by this.
      if (message.has_heartbeat()) {
        v1::CoordinatorMessage ack;
        ack.mutable_heartbeat_ack()->set_sequence(
            message.heartbeat().sequence());
        connection->Send(ack);
      }
    }
  }
  connection->Finish();
  // Also after a failed OnAttach: the node may be registered already.
  coordinator_->OnDetach(node, connection.get());
  return scope.Finish(attached.ok() && context->IsCancelled()
                          ? absl::CancelledError("the Attach stream ended")
                          : attached);
}

}  // namespace plateau::daemon
