#include "client/connection.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace plateau::client {

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    const ClientConfig& config) {
  RETURN_IF_ERROR(CheckTokenTransport(config));
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (config.ca_cert_file.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions options;
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadFileToString(config.ca_cert_file));
    credentials = grpc::SslCredentials(options);
  }
  return std::unique_ptr<Connection>(
      new Connection(config.coordinator, config.token,
                     grpc::CreateChannel(config.coordinator, credentials)));
}

Connection::Connection(std::string address, std::string token,
                       std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      token_(std::move(token)),
      channel_(std::move(channel)),
      stub_(v1::Coordinator::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> Connection::NewContext(
    std::optional<absl::Duration> timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!token_.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }
  if (timeout.has_value()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + *timeout));
  }
  return context;
}

absl::Status Connection::Error(const grpc::Status& status) const {
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::Status(
          code, absl::StrCat("cannot reach plateaud at ", address_, ": ",
                             status.error_message()));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::Status(code, absl::StrCat("plateaud at ", address_,
                                             " did not answer in time"));
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::Status(
          code, absl::StrCat(status.error_message(),
                             " (set PLATEAU_TOKEN, --token_file or the "
                             "config file's token)"));
    default:
      return absl::Status(code, status.error_message());
  }
}

absl::Status JobError(const absl::Status& status, const std::string& job_id) {
  if (absl::IsNotFound(status)) {
    return absl::NotFoundError(absl::StrCat("no job ", job_id));
  }
  return status;
}

absl::StatusOr<v1::Job> FetchJob(Connection& connection,
                                 const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status =
      connection.stub().GetJob(connection.NewContext().get(), request, &job);
  if (!status.ok()) return JobError(connection.Error(status), job_id);
  return job;
}

void CallCanceller::Register(grpc::ClientContext* context) {
  absl::MutexLock lock(&mutex_);
  context_ = context;
  if (cancelled_) context_->TryCancel();
}

void CallCanceller::Unregister() {
  absl::MutexLock lock(&mutex_);
  context_ = nullptr;
}

void CallCanceller::Cancel() {
  absl::MutexLock lock(&mutex_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool CallCanceller::cancelled() const {
  absl::MutexLock lock(&mutex_);
  return cancelled_;
}

}  // namespace plateau::client
