// Serves a Prometheus registry over HTTP at /metrics (prometheus-cpp's
// Exposer), for plateaud and plateau-worker alike.
#ifndef PLATEAU_COMMON_METRICS_SERVER_H_
#define PLATEAU_COMMON_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace plateau {

class MetricsServer {
 public:
  // bind_address "127.0.0.1:9400"; port 0 picks a free one. UNAVAILABLE,
  // naming the address, when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& bind_address,
      std::shared_ptr<prometheus::Registry> registry);
  int port() const { return port_; }

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace plateau

#endif  // PLATEAU_COMMON_METRICS_SERVER_H_
