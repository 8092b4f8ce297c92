// The HTTP endpoint of plateaud and plateau-worker (civetweb): /metrics, a
// Prometheus registry in the text exposition format, and any JSON endpoints
// the process adds (plateaud's HTTP service discovery of its workers).
#ifndef PLATEAU_COMMON_METRICS_SERVER_H_
#define PLATEAU_COMMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

class CivetServer;
class CivetHandler;

namespace plateau {

class MetricsServer {
 public:
  // bind_address "127.0.0.1:9400"; port 0 picks a free one. UNAVAILABLE,
  // naming the address, when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& bind_address,
      std::shared_ptr<prometheus::Registry> registry);
  ~MetricsServer();

  // Serves what `body` returns, as application/json, at `path` ("/sd/x").
  // `body` is called on the server's threads; it must be thread-safe and
  // outlive the server.
  void AddJsonEndpoint(const std::string& path,
                       std::function<std::string()> body);

  int port() const { return port_; }

 private:
  MetricsServer() = default;

  std::unique_ptr<CivetServer> server_;
  std::vector<std::unique_ptr<CivetHandler>> handlers_;
  int port_ = 0;
};

}  // namespace plateau

#endif  // PLATEAU_COMMON_METRICS_SERVER_H_
