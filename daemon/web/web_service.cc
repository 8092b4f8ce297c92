#include "daemon/web/web_service.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/jobs/job_mentions.h"
#include "daemon/web/web_assets.h"
#include "daemon/web/web_pages.h"

namespace plateau::daemon {
namespace {

constexpr char kCookie[] = "plateau_token";
constexpr char kBearer[] = "Bearer ";
// The jobs page shows the newest this many.
constexpr int kListedJobs = 500;

HttpResponse Html(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

HttpResponse Redirect(const std::string& location) {
  HttpResponse response;
  response.status = 303;
  response.headers.emplace_back("Location", location);
  return response;
}

// %XX and '+' of a form or cookie value; malformed escapes stay as they are.
std::string Unescape(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%' && i + 2 < text.size() &&
               absl::ascii_isxdigit(text[i + 1]) &&
               absl::ascii_isxdigit(text[i + 2])) {
      const std::string hex(text.substr(i + 1, 2));
      out += static_cast<char>(std::stoi(hex, nullptr, 16));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

// Everything but unreserved characters as %XX: a cookie value cannot hold
// ';', ',', spaces or quotes.
std::string Escape(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out += c;
    } else {
      absl::StrAppend(
          &out, "%", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    }
  }
  return out;
}

// The value of `name` in a Cookie header or a form body ("a=1; b=2",
// "a=1&b=2"), unescaped; "" when absent.
std::string ValueOf(absl::string_view text, char separator,
                    absl::string_view name) {
  for (absl::string_view pair : absl::StrSplit(text, separator)) {
    pair = absl::StripAsciiWhitespace(pair);
    if (absl::ConsumePrefix(&pair, name) && absl::ConsumePrefix(&pair, "=")) {
      return Unescape(pair);
    }
  }
  return "";
}

}  // namespace

WebService::WebService(JobManager* jobs, Coordinator* coordinator,
                       const Authenticator* authenticator, bool tokens_allowed,
                       Clock clock)
    : jobs_(jobs),
      coordinator_(coordinator),
      authenticator_(authenticator),
      tokens_allowed_(tokens_allowed),
      clock_(std::move(clock)) {}

void WebService::Register(MetricsServer* server) {
  for (const char* path : {"/$", "/jobs", "/nodes", "/login", "/logout",
                           "/static", "/favicon.ico"}) {
    server->AddHandler(
        path, [this](const HttpRequest& request) { return Handle(request); });
  }
}

absl::StatusOr<Principal> WebService::Caller(const HttpRequest& request) const {
  std::string token;
  if (absl::StartsWith(request.authorization, kBearer)) {
    token = request.authorization.substr(sizeof(kBearer) - 1);
  } else {
    token = ValueOf(request.cookie, ';', kCookie);
  }
  if (token.empty() && authenticator_->enabled()) {
    return absl::UnauthenticatedError("no token");
  }
  absl::StatusOr<Principal> principal =
      authenticator_->AuthenticateToken(token);
  if (principal.ok() && principal->role != Role::kUser &&
      principal->role != Role::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat(principal->name, " is not a user"));
  }
  return principal;
}

HttpResponse WebService::Handle(const HttpRequest& request) const {
  const std::string& path = request.path;
  // Browsers ask for it on their own; the page has none.
  if (path == "/favicon.ico") return Html(204, "");
  if (absl::StartsWith(path, "/static/")) {
    const auto found = WebAssets().find(path);
    if (found == WebAssets().end()) {
      return Html(404, MessageHtml("Not found", "no such file", ""));
    }
    HttpResponse response;
    response.content_type = std::string(found->second.content_type);
    response.body = std::string(found->second.body);
    return response;
  }
  if (authenticator_->enabled() && !tokens_allowed_) {
    return Html(403, MessageHtml("Not available",
                                 "This page takes tokens, and its address is "
                                 "not loopback: plateaud would receive them "
                                 "in plaintext. Serve it on loopback "
                                 "(--metrics_listen) or, on a network you "
                                 "trust, pass --allow_plaintext_tokens.",
                                 ""));
  }
  if (path == "/login") return Login(request);
  if (path == "/logout") {
    HttpResponse response = Redirect("/login");
    response.headers.emplace_back(
        "Set-Cookie", absl::StrCat(kCookie,
                                   "=; Max-Age=0; HttpOnly; SameSite=Strict; "
                                   "Path=/"));
    return response;
  }
  if (request.method != "GET") {
    return Html(405, MessageHtml("Not allowed", "this page is read-only", ""));
  }
  absl::StatusOr<Principal> caller = Caller(request);
  if (!caller.ok()) return Redirect("/login");
  if (path == "/" || path == "/jobs" || path == "/jobs/") return Jobs(*caller);
  if (path == "/nodes") return Nodes(*caller);
  absl::string_view job_id = path;
  if (absl::ConsumePrefix(&job_id, "/jobs/")) {
    return Job(*caller, std::string(job_id));
  }
  return Html(404, MessageHtml("Not found", absl::StrCat("nothing at ", path),
                               caller->name));
}

HttpResponse WebService::Login(const HttpRequest& request) const {
  if (!authenticator_->enabled()) return Redirect("/jobs");
  if (request.method != "POST") return Html(200, LoginHtml(""));
  const std::string token = ValueOf(request.body, '&', "token");
  absl::StatusOr<Principal> principal =
      token.empty() ? absl::UnauthenticatedError("no token")
                    : authenticator_->AuthenticateToken(token);
  if (!principal.ok() ||
      (principal->role != Role::kUser && principal->role != Role::kAdmin)) {
    return Html(401, LoginHtml("That token is not a user's or an admin's."));
  }
  HttpResponse response = Redirect("/jobs");
  response.headers.emplace_back(
      "Set-Cookie", absl::StrCat(kCookie, "=", Escape(token),
                                 "; HttpOnly; SameSite=Strict; Path=/"));
  return response;
}

HttpResponse WebService::Jobs(const Principal& caller) const {
  JobListFilter filter;
  if (caller.role != Role::kAdmin) filter.owner = caller.name;
  filter.page_size = kListedJobs;
  filter.summaries = true;
  absl::StatusOr<JobPage> page = jobs_->List(filter);
  if (!page.ok()) {
    return Html(500, MessageHtml("Error", std::string(page.status().message()),
                                 caller.name));
  }
  return Html(200, JobsHtml(page->jobs, caller.name));
}

HttpResponse WebService::Job(const Principal& caller,
                             const std::string& job_id) const {
  absl::StatusOr<v1::Job> job = jobs_->Get(job_id);
  if (!job.ok() || !caller.CanSeeJobsOf(job->owner())) {
    return Html(404, MessageHtml("Not found", absl::StrCat("no job ", job_id),
                                 caller.name));
  }
  const JobShown shown = JobsShown(jobs_, caller.role == Role::kAdmin,
                                   [&caller](const std::string& owner) {
                                     return caller.CanSeeJobsOf(owner);
                                   });
  HideUnshownJobs(shown, &*job);
  std::vector<v1::JobEvent> events;
  absl::Status read = jobs_->ReadLog(job_id, 0, [&](const v1::LogEntry& entry) {
    if (!entry.has_event()) return true;
    events.push_back(entry.event());
    HideUnshownJobs(shown, &events.back());
    return true;
  });
  absl::StatusOr<std::vector<v1::ProgressSample>> samples =
      jobs_->ProgressSamples(job_id);
  if (!read.ok() || !samples.ok()) {
    return Html(
        500, MessageHtml(
                 "Error",
                 std::string((read.ok() ? samples.status() : read).message()),
                 caller.name));
  }
  return Html(200, JobHtml(*job, events, *samples, caller.name));
}

HttpResponse WebService::Nodes(const Principal& caller) const {
  // Others' jobs show only as taken devices, as in `plateau nodes`.
  const std::vector<v1::Node> nodes =
      coordinator_->ListNodes([&caller](const std::string& owner) {
        return caller.CanSeeJobsOf(owner);
      });
  return Html(200, NodesHtml(nodes, caller.name, clock_()));
}

}  // namespace plateau::daemon
