#include "common/metrics_server.h"

#include <exception>
#include <sstream>
#include <utility>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace plateau {
namespace {

// Answers GET with 200 and what `body` returns.
class BodyHandler final : public CivetHandler {
 public:
  BodyHandler(std::string content_type, std::function<std::string()> body)
      : content_type_(std::move(content_type)), body_(std::move(body)) {}

  bool handleGet(CivetServer* /*server*/, mg_connection* connection) override {
    const std::string body = body_();
    mg_send_http_ok(connection, content_type_.c_str(),
                    static_cast<long long>(body.size()));
    mg_write(connection, body.data(), body.size());
    return true;
  }

 private:
  const std::string content_type_;
  const std::function<std::string()> body_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& bind_address,
    std::shared_ptr<prometheus::Registry> registry) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->server_ = std::make_unique<CivetServer>(std::vector<std::string>{
        "listening_ports", bind_address, "num_threads", "4"});
  } catch (const std::exception& error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", bind_address, ": ", error.what()));
  }
  const std::vector<int> ports = server->server_->getListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  auto metrics = std::make_unique<BodyHandler>(
      "text/plain; version=0.0.4; charset=utf-8", [registry] {
        std::ostringstream text;
        prometheus::TextSerializer().Serialize(text, registry->Collect());
        return text.str();
      });
  server->server_->addHandler("/metrics", metrics.get());
  server->handlers_.push_back(std::move(metrics));
  return server;
}

MetricsServer::~MetricsServer() {
  if (server_ != nullptr) server_->close();  // before the handlers go
}

void MetricsServer::AddJsonEndpoint(const std::string& path,
                                    std::function<std::string()> body) {
  auto handler =
      std::make_unique<BodyHandler>("application/json", std::move(body));
  server_->addHandler(path, handler.get());
  handlers_.push_back(std::move(handler));
}

}  // namespace plateau
