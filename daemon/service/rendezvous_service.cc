#include "daemon/service/rendezvous_service.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/service/rpc_support.h"

namespace plateau::daemon {
namespace {

// Ranks of a large job can take a while to start; beyond this a rank is
// better off failing with a clear error than hanging.
constexpr absl::Duration kMaxWait = absl::Minutes(10);

}  // namespace

absl::Status RendezvousService::Authorize(const grpc::ServerContext& context,
                                          const std::string& scope) const {
  absl::StatusOr<Principal> principal = authenticator_->Authenticate(context);
  if (!principal.ok()) return principal.status();
  RETURN_IF_ERROR(RequireRole(*principal, {Role::kNode, Role::kAdmin}));
  if (principal->role == Role::kNode &&
      !coordinator_->NodeMayUseScope(principal->name, scope)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", principal->name, " runs no live attempt with rendezvous key '",
        scope, "'"));
  }
  return absl::OkStatus();
}

grpc::Status RendezvousService::Set(grpc::ServerContext* context,
                                    const v1::RendezvousSetRequest* request,
                                    v1::RendezvousSetResponse*) {
  RpcScope scope(metrics_, "RendezvousSet");
  absl::Status status = Authorize(*context, request->scope());
  if (status.ok()) {
    status = store_->Set(request->scope(), request->key(), request->value());
  }
  return scope.Finish(status);
}

grpc::Status RendezvousService::Get(grpc::ServerContext* context,
                                    const v1::RendezvousGetRequest* request,
                                    v1::RendezvousGetResponse* response) {
  RpcScope scope(metrics_, "RendezvousGet");
  absl::Status status = Authorize(*context, request->scope());
  if (!status.ok()) return scope.Finish(status);
  absl::StatusOr<std::string> value =
      store_->Get(request->scope(), request->key());
  if (!value.ok()) return scope.Finish(value.status());
  response->set_value(*std::move(value));
  return scope.Finish(absl::OkStatus());
}

grpc::Status RendezvousService::Wait(grpc::ServerContext* context,
                                     const v1::RendezvousWaitRequest* request,
                                     v1::RendezvousWaitResponse*) {
  RpcScope scope(metrics_, "RendezvousWait");
  absl::Status status = Authorize(*context, request->scope());
  if (!status.ok()) return scope.Finish(status);
  const absl::Duration requested =
      absl::Seconds(request->timeout().seconds()) +
      absl::Nanoseconds(request->timeout().nanos());
  const absl::Duration timeout =
      std::clamp(requested > absl::ZeroDuration() ? requested : kMaxWait,
                 absl::ZeroDuration(), kMaxWait);
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  return scope.Finish(store_->Wait(request->scope(), keys, timeout, [context] {
    return context->IsCancelled();
  }));
}

}  // namespace plateau::daemon
