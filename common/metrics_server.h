// The HTTP endpoint of plateaud and plateau-worker (civetweb): /metrics, a
// Prometheus registry in the text exposition format, and any JSON endpoints
// and pages the process adds (plateaud's HTTP service discovery of its
// workers, and its web page).
#ifndef PLATEAU_COMMON_METRICS_SERVER_H_
#define PLATEAU_COMMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

class CivetServer;
class CivetHandler;

namespace plateau {

struct HttpRequest {
  std::string method;  // "GET" or "POST"
  std::string path;    // decoded, without the query: "/jobs/j-1x7k3m9q2v8d4"
  // Headers, "" when absent.
  std::string authorization;
  std::string cookie;
  // POST only: the form, at most kMaxHttpBodyBytes.
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/html; charset=utf-8";
  std::string body;
  // More headers, e.g. {"Location", "/jobs"}, {"Set-Cookie", ...}.
  std::vector<std::pair<std::string, std::string>> headers;
};

// A larger POST body is refused with 413 before the handler sees it.
inline constexpr size_t kMaxHttpBodyBytes = 16 * 1024;

// Whether a request's Authorization header ("" when absent) may read
// /metrics and the JSON endpoints; unset: anyone may.
using MetricsAuthorization = std::function<bool(const std::string& header)>;

class MetricsServer {
 public:
  // bind_address "127.0.0.1:9400"; port 0 picks a free one. UNAVAILABLE,
  // naming the address, when it cannot listen there.
  // A request `authorize` refuses gets 401 ("WWW-Authenticate: Bearer")
  // and nothing of the registry or the endpoints.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& bind_address,
      std::shared_ptr<prometheus::Registry> registry,
      MetricsAuthorization authorize = nullptr);
  ~MetricsServer();

  // Serves what `body` returns, as application/json, at `path` ("/sd/x").
  // `body` is called on the server's threads; it must be thread-safe and
  // outlive the server.
  void AddJsonEndpoint(const std::string& path,
                       std::function<std::string()> body);
  // Answers GET and POST at `path` and below it ("/jobs" takes "/jobs/j-1"
  // too; "/$" takes only the root) with what `handler` returns, adding
  // headers that keep browsers from caching it, sniffing its type, framing
  // it or running scripts from elsewhere. Same thread-safety and lifetime
  // as AddJsonEndpoint.
  void AddHandler(const std::string& path,
                  std::function<HttpResponse(const HttpRequest&)> handler);

  int port() const { return port_; }

 private:
  MetricsServer() = default;

  MetricsAuthorization authorize_;
  std::unique_ptr<CivetServer> server_;
  std::vector<std::unique_ptr<CivetHandler>> handlers_;
  int port_ = 0;
};

}  // namespace plateau

#endif  // PLATEAU_COMMON_METRICS_SERVER_H_
