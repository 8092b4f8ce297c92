#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/gauge.h"

namespace plateau {
namespace {

using testing::HasSubstr;
using testing::Not;

// The whole HTTP/1.0 response to `request` sent to 127.0.0.1:`port`.
std::string Send(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return "";
  }
  if (write(fd, request.data(), request.size()) < 0) return "";
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  return response;
}

std::string Get(int port, const std::string& path) {
  return Send(port, absl::StrCat("GET ", path, " HTTP/1.0\r\n\r\n"));
}

TEST(MetricsServerTest, ServesTheRegistryAndJsonEndpoints) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("plateau_test_bytes")
      .Help("a test gauge")
      .Register(*registry)
      .Add({{"job", "j-1"}})
      .Set(42);
  auto server = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  (*server)->AddJsonEndpoint("/sd/things",
                             [] { return std::string(R"([{"targets":[]}])"); });
  const std::string metrics = Get((*server)->port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(metrics, HasSubstr("plateau_test_bytes{job=\"j-1\"} 42"));
  const std::string json = Get((*server)->port(), "/sd/things");
  EXPECT_THAT(json, HasSubstr("application/json"));
  EXPECT_THAT(json, HasSubstr(R"([{"targets":[]}])"));
  EXPECT_THAT(Get((*server)->port(), "/nothing"), HasSubstr("404"));
}

TEST(MetricsServerTest, AnAuthorizationGuardsTheRegistryAndJsonEndpoints) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("plateau_test_bytes")
      .Help("a test gauge")
      .Register(*registry)
      .Add({{"user", "ada"}})
      .Set(42);
  auto server = MetricsServer::Start(
      "127.0.0.1:0", registry,
      [](const std::string& h) { return h == "Bearer scrape-token"; });
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->AddJsonEndpoint("/sd/things",
                             [] { return std::string(R"([{"targets":[]}])"); });
  const int port = (*server)->port();
  for (const char* path : {"/metrics", "/sd/things"}) {
    const std::string refused = Get(port, path);
    EXPECT_THAT(refused, HasSubstr("401 Unauthorized")) << path;
    EXPECT_THAT(refused, HasSubstr("WWW-Authenticate: Bearer")) << path;
    EXPECT_THAT(refused, Not(HasSubstr("ada"))) << path;
    EXPECT_THAT(Send(port, absl::StrCat("GET ", path,
                                        " HTTP/1.0\r\nAuthorization: Bearer "
                                        "wrong\r\n\r\n")),
                HasSubstr("401 Unauthorized"))
        << path;
  }
  const std::string metrics =
      Send(port,
           "GET /metrics HTTP/1.0\r\nAuthorization: Bearer scrape-token\r\n"
           "\r\n");
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(metrics, HasSubstr("plateau_test_bytes{user=\"ada\"} 42"));
}

TEST(MetricsServerTest, HandlersSeeTheRequestAndSetTheResponse) {
  auto server = MetricsServer::Start("127.0.0.1:0",
                                     std::make_shared<prometheus::Registry>());
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->AddHandler("/things", [](const HttpRequest& request) {
    HttpResponse response;
    response.status = request.method == "POST" ? 303 : 200;
    response.content_type = "text/plain";
    response.body = absl::StrCat(request.method, " ", request.path, " [",
                                 request.cookie, "] [", request.body, "]");
    response.headers.emplace_back("Location", "/elsewhere");
    return response;
  });
  const int port = (*server)->port();
  const std::string got =
      Send(port, "GET /things/a%20b?x=1 HTTP/1.0\r\nCookie: k=v\r\n\r\n");
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_THAT(got, HasSubstr("GET /things/a b [k=v] []"));
  EXPECT_THAT(got, HasSubstr("Location: /elsewhere\r\n"));
  // No caching, sniffing, framing or scripts from elsewhere.
  EXPECT_THAT(got, HasSubstr("Cache-Control: no-store\r\n"));
  EXPECT_THAT(got, HasSubstr("X-Content-Type-Options: nosniff\r\n"));
  EXPECT_THAT(got, HasSubstr("Content-Security-Policy: default-src 'self'"));
  const std::string posted =
      Send(port, "POST /things HTTP/1.0\r\nContent-Length: 7\r\n\r\ntoken=x");
  EXPECT_THAT(posted, HasSubstr("HTTP/1.1 303 See Other"));
  EXPECT_THAT(posted, HasSubstr("POST /things [] [token=x]"));
  // A body too large never reaches the handler.
  const std::string large =
      Send(port, absl::StrCat("POST /things HTTP/1.0\r\nContent-Length: ",
                              kMaxHttpBodyBytes + 1, "\r\n\r\n",
                              std::string(kMaxHttpBodyBytes + 1, 'x')));
  EXPECT_THAT(large, HasSubstr("HTTP/1.1 413"));
  EXPECT_THAT(large, Not(HasSubstr("POST /things")));
}

TEST(MetricsServerTest, ATakenPortIsAnError) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start(
      absl::StrCat("127.0.0.1:", (*first)->port()), registry);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", (*first)->port())));
}

}  // namespace
}  // namespace plateau
