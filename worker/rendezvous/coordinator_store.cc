#include "worker/rendezvous/coordinator_store.h"

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "grpcpp/client_context.h"

namespace plateau::worker {
namespace {

// The RPC's own deadline leaves the coordinator time to answer a Wait that
// timed out on its side.
constexpr std::chrono::seconds kReplyMargin(10);

void Prepare(grpc::ClientContext& context, const std::string& token,
             std::chrono::milliseconds timeout) {
  if (!token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
  context.set_deadline(std::chrono::system_clock::now() + timeout +
                       kReplyMargin);
}

[[noreturn]] void Fail(const char* rpc, const std::string& what,
                       const grpc::Status& status) {
  throw gloo::IoException(absl::StrCat(
      "plateaud rendezvous ", rpc, " of ", what, " failed: ",
      status.error_message(), " (gRPC code ", status.error_code(), ")"));
}

}  // namespace

CoordinatorStore::CoordinatorStore(std::shared_ptr<grpc::Channel> channel,
                                   std::string scope, std::string token,
                                   std::chrono::milliseconds timeout)
    : stub_(v1::Rendezvous::NewStub(channel)),
      scope_(std::move(scope)),
      token_(std::move(token)),
      timeout_(timeout) {}

void CoordinatorStore::set(const std::string& key,
                           const std::vector<char>& data) {
  v1::RendezvousSetRequest request;
  request.set_scope(scope_);
  request.set_key(key);
  request.set_value(std::string(data.begin(), data.end()));
  v1::RendezvousSetResponse response;
  grpc::ClientContext context;
  Prepare(context, token_, timeout_);
  const grpc::Status status = stub_->Set(&context, request, &response);
  if (!status.ok()) Fail("Set", absl::StrCat("key '", key, "'"), status);
}

std::vector<char> CoordinatorStore::get(const std::string& key) {
  wait({key}, timeout_);
  v1::RendezvousGetRequest request;
  request.set_scope(scope_);
  request.set_key(key);
  v1::RendezvousGetResponse response;
  grpc::ClientContext context;
  Prepare(context, token_, timeout_);
  const grpc::Status status = stub_->Get(&context, request, &response);
  if (!status.ok()) Fail("Get", absl::StrCat("key '", key, "'"), status);
  return std::vector<char>(response.value().begin(), response.value().end());
}

void CoordinatorStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void CoordinatorStore::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  v1::RendezvousWaitRequest request;
  request.set_scope(scope_);
  for (const std::string& key : keys) request.add_keys(key);
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(timeout);
  request.mutable_timeout()->set_seconds(seconds.count());
  request.mutable_timeout()->set_nanos(static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(timeout - seconds)
          .count()));
  v1::RendezvousWaitResponse response;
  grpc::ClientContext context;
  Prepare(context, token_, timeout);
  const grpc::Status status = stub_->Wait(&context, request, &response);
  if (!status.ok()) {
    Fail("Wait",
         absl::StrCat(keys.size(), " keys (first '",
                      keys.empty() ? "" : keys.front(), "')"),
         status);
  }
}

}  // namespace plateau::worker
