#include "worker/agent/coordinator_channel.h"

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

}  // namespace plateau::worker
