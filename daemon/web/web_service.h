// plateaud's read-only web page, on its metrics address: /jobs (the jobs),
// /jobs/<id> (a job's history, attempts, allocation, loss and tokens/s over
// time, and each rank's memory peaks by component, as a stacked bar and
// over time), /nodes, and /static/ (the page's script and style and the
// uPlot charting library, built into the binary). "/" is the jobs page.
//
// Auth as for the API: with a tokens file, a request carries the token in
// an "Authorization: Bearer" header or in the plateau_token cookie that
// /login sets (HttpOnly, SameSite=Strict); /logout clears it. Users see
// their own jobs (another user's is "not found") and only that others'
// jobs hold devices; admins see everything; node tokens are refused. The
// page has no TLS, so with auth on it takes tokens only when it is served
// on loopback or --allow_plaintext_tokens says the network is trusted;
// otherwise every page says so. Without a tokens file everyone is the
// admin "local", as for the API.
#ifndef PLATEAU_DAEMON_WEB_WEB_SERVICE_H_
#define PLATEAU_DAEMON_WEB_WEB_SERVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/metrics_server.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/service/auth.h"

namespace plateau::daemon {

class WebService {
 public:
  // `tokens_allowed`: the page may take tokens (see above).
  WebService(JobManager* jobs, Coordinator* coordinator,
             const Authenticator* authenticator, bool tokens_allowed,
             Clock clock);

  // Serves the routes on `server`, which must not outlive this.
  void Register(MetricsServer* server);

  HttpResponse Handle(const HttpRequest& request) const;

 private:
  // The caller, from the header or the cookie.
  absl::StatusOr<Principal> Caller(const HttpRequest& request) const;
  HttpResponse Login(const HttpRequest& request) const;
  HttpResponse Jobs(const Principal& caller) const;
  HttpResponse Job(const Principal& caller, const std::string& job_id) const;
  HttpResponse Nodes(const Principal& caller) const;

  JobManager* const jobs_;
  Coordinator* const coordinator_;
  const Authenticator* const authenticator_;
  const bool tokens_allowed_;
  const Clock clock_;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_WEB_WEB_SERVICE_H_
