#include "common/metrics_server.h"

#include <exception>
#include <sstream>
#include <utility>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace plateau {
namespace {

// Answers GET with 200 and what `body` returns, or 401 to a request that
// `authorize` refuses.
class BodyHandler final : public CivetHandler {
 public:
  BodyHandler(std::string content_type, std::function<std::string()> body,
              MetricsAuthorization authorize)
      : content_type_(std::move(content_type)),
        body_(std::move(body)),
        authorize_(std::move(authorize)) {}

  bool handleGet(CivetServer* /*server*/, mg_connection* connection) override {
    if (authorize_ != nullptr) {
      const char* header = mg_get_header(connection, "Authorization");
      if (!authorize_(header != nullptr ? header : "")) {
        constexpr char kRefused[] =
            "a bearer token is needed here: a scraper's or an admin's\n";
        const std::string head = absl::StrCat(
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\n"
            "Content-Type: text/plain; charset=utf-8\r\nContent-Length: ",
            sizeof(kRefused) - 1, "\r\nConnection: close\r\n\r\n");
        mg_write(connection, head.data(), head.size());
        mg_write(connection, kRefused, sizeof(kRefused) - 1);
        return true;
      }
    }
    const std::string body = body_();
    mg_send_http_ok(connection, content_type_.c_str(),
                    static_cast<long long>(body.size()));
    mg_write(connection, body.data(), body.size());
    return true;
  }

 private:
  const std::string content_type_;
  const std::function<std::string()> body_;
  const MetricsAuthorization authorize_;
};

// Answers GET and POST with what `handler` returns.
class RequestHandler final : public CivetHandler {
 public:
  explicit RequestHandler(
      std::function<HttpResponse(const HttpRequest&)> handler)
      : handler_(std::move(handler)) {}

  bool handleGet(CivetServer* /*server*/, mg_connection* connection) override {
    return Handle(connection, "GET");
  }
  bool handlePost(CivetServer* /*server*/, mg_connection* connection) override {
    return Handle(connection, "POST");
  }

 private:
  bool Handle(mg_connection* connection, const char* method) {
    const mg_request_info* info = mg_get_request_info(connection);
    HttpRequest request;
    request.method = method;
    request.path = info->local_uri != nullptr ? info->local_uri : "/";
    const char* authorization = mg_get_header(connection, "Authorization");
    if (authorization != nullptr) request.authorization = authorization;
    const char* cookie = mg_get_header(connection, "Cookie");
    if (cookie != nullptr) request.cookie = cookie;
    HttpResponse response;
    if (request.method == "POST" &&
        (info->content_length < 0 ||
         static_cast<size_t>(info->content_length) > kMaxHttpBodyBytes)) {
      response.status = 413;
      response.content_type = "text/plain; charset=utf-8";
      response.body = "the request body is missing or too large\n";
    } else {
      if (request.method == "POST") {
        request.body.resize(static_cast<size_t>(info->content_length));
        size_t read = 0;
        while (read < request.body.size()) {
          const int n = mg_read(connection, request.body.data() + read,
                                request.body.size() - read);
          if (n <= 0) break;
          read += static_cast<size_t>(n);
        }
        request.body.resize(read);
      }
      response = handler_(request);
    }
    std::string head =
        absl::StrCat("HTTP/1.1 ", response.status, " ",
                     mg_get_response_code_text(connection, response.status),
                     "\r\nContent-Type: ", response.content_type,
                     "\r\nContent-Length: ", response.body.size(),
                     "\r\nCache-Control: no-store"
                     "\r\nX-Content-Type-Options: nosniff"
                     "\r\nContent-Security-Policy: default-src 'self'; "
                     "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"
                     "\r\nConnection: close\r\n");
    for (const auto& [name, value] : response.headers) {
      absl::StrAppend(&head, name, ": ", value, "\r\n");
    }
    absl::StrAppend(&head, "\r\n");
    mg_write(connection, head.data(), head.size());
    mg_write(connection, response.body.data(), response.body.size());
    return true;
  }

  const std::function<HttpResponse(const HttpRequest&)> handler_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& bind_address,
    std::shared_ptr<prometheus::Registry> registry,
    MetricsAuthorization authorize) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->authorize_ = std::move(authorize);
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
      "text/plain; version=0.0.4; charset=utf-8",
      [registry] {
        std::ostringstream text;
        prometheus::TextSerializer().Serialize(text, registry->Collect());
        return text.str();
      },
      server->authorize_);
  server->server_->addHandler("/metrics", metrics.get());
  server->handlers_.push_back(std::move(metrics));
  return server;
}

MetricsServer::~MetricsServer() {
  if (server_ != nullptr) server_->close();  // before the handlers go
}

void MetricsServer::AddHandler(
    const std::string& path,
    std::function<HttpResponse(const HttpRequest&)> handler) {
  auto request_handler = std::make_unique<RequestHandler>(std::move(handler));
  server_->addHandler(path, request_handler.get());
  handlers_.push_back(std::move(request_handler));
}

void MetricsServer::AddJsonEndpoint(const std::string& path,
                                    std::function<std::string()> body) {
  auto handler = std::make_unique<BodyHandler>("application/json",
                                               std::move(body), authorize_);
  server_->addHandler(path, handler.get());
  handlers_.push_back(std::move(handler));
}

}  // namespace plateau
