#include "common/metrics_server.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"

namespace plateau {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& bind_address,
    std::shared_ptr<prometheus::Registry> registry) {
  auto server = std::make_unique<MetricsServer>();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(bind_address);
  } catch (const std::exception& error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", bind_address, ": ", error.what()));
  }
  server->exposer_->RegisterCollectable(registry);
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  return server;
}

}  // namespace plateau
