// The web page's routes and auth over an in-memory JobManager and a real
// Authenticator: who sees what, the sign-in cookie, and what is refused.
#include "daemon/web/web_service.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/test_files.h"
#include "daemon/service/auth.h"
#include "daemon/store/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;

class WebServiceTest : public ::testing::Test {
 protected:
  WebServiceTest() {
    const std::string tokens =
        testing::MakeTestDirectory("web") + "/tokens.yaml";
    testing::WriteTestFile(
        tokens, absl::StrCat("users:\n  - {name: ada, role: user, "
                             "token_sha256: ",
                             TokenHash("ada token"),
                             "}\n  - {name: root, role: admin, token_sha256: ",
                             TokenHash("root-token"),
                             "}\nnodes:\n  - {name: node-a, token_sha256: ",
                             TokenHash("node-token"), "}\n"));
    authenticator_ = Authenticator::FromFile(tokens).value();
    const Clock clock = [] { return absl::FromUnixSeconds(1'800'000'000); };
    jobs_ = JobManager::Open(&store_, clock).value();
    nodes_ = NodeRegistry::Open(&store_, clock, absl::Seconds(10)).value();
    coordinator_ = std::make_unique<Coordinator>(
        jobs_.get(), nodes_.get(), &rendezvous_, &metrics_, &store_, clock,
        CoordinatorOptions());
    v1::JobSpec spec;
    spec.set_name("ada's run");
    ada_job_ = jobs_->Submit(spec, "", "ada", "")->id();
    root_job_ = jobs_->Submit(spec, "", "root", "")->id();
  }

  HttpResponse Get(const std::string& path, const std::string& cookie = "",
                   bool tokens_allowed = true) {
    WebService web(jobs_.get(), coordinator_.get(), authenticator_.get(),
                   tokens_allowed, [] { return absl::Now(); });
    HttpRequest request;
    request.method = "GET";
    request.path = path;
    request.cookie = cookie;
    return web.Handle(request);
  }

  HttpResponse SignIn(const std::string& form) {
    WebService web(jobs_.get(), coordinator_.get(), authenticator_.get(),
                   /*tokens_allowed=*/true, [] { return absl::Now(); });
    HttpRequest request;
    request.method = "POST";
    request.path = "/login";
    request.body = form;
    return web.Handle(request);
  }

  MemoryStore store_;
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<NodeRegistry> nodes_;
  RendezvousStore rendezvous_;
  DaemonMetrics metrics_;
  std::unique_ptr<Coordinator> coordinator_;
  std::string ada_job_;
  std::string root_job_;
};

TEST_F(WebServiceTest, WithoutATokenEveryPageAsksForOne) {
  for (const char* path : {"/", "/jobs", "/nodes", "/jobs/j-00000001"}) {
    const HttpResponse response = Get(path);
    EXPECT_EQ(response.status, 303) << path;
    EXPECT_THAT(response.headers,
                ::testing::Contains(Pair("Location", "/login")));
  }
  EXPECT_THAT(Get("/login").body, HasSubstr("id=\"login-form\""));
  // A node's token is no way in.
  EXPECT_EQ(Get("/jobs", "plateau_token=node-token").status, 303);
}

TEST_F(WebServiceTest, SigningInSetsTheCookieThePagesRead) {
  const HttpResponse refused = SignIn("token=wrong");
  EXPECT_EQ(refused.status, 401);
  EXPECT_THAT(refused.body, HasSubstr("class=\"error\""));
  EXPECT_EQ(SignIn("token=node-token").status, 401);
  // The form encodes the space; the cookie keeps it escaped.
  const HttpResponse signed_in = SignIn("token=ada+token");
  EXPECT_EQ(signed_in.status, 303);
  EXPECT_THAT(signed_in.headers,
              ::testing::Contains(
                  Pair("Set-Cookie",
                       "plateau_token=ada%20token; HttpOnly; SameSite=Strict; "
                       "Path=/")));
  const HttpResponse jobs = Get("/jobs", "theme=x; plateau_token=ada%20token");
  EXPECT_EQ(jobs.status, 200);
  EXPECT_THAT(jobs.body, HasSubstr(absl::StrCat("data-job-id=\"", ada_job_)));
  // A user sees only their own jobs; another's is not found.
  EXPECT_FALSE(absl::StrContains(jobs.body, root_job_));
  EXPECT_EQ(Get("/jobs/" + ada_job_, "plateau_token=ada%20token").status, 200);
  EXPECT_EQ(Get("/jobs/" + root_job_, "plateau_token=ada%20token").status, 404);
  // An admin sees everyone's.
  const HttpResponse all = Get("/jobs", "plateau_token=root-token");
  EXPECT_THAT(all.body, HasSubstr(ada_job_));
  EXPECT_THAT(all.body, HasSubstr(root_job_));
  EXPECT_EQ(Get("/jobs/" + ada_job_, "plateau_token=root-token").status, 200);
  EXPECT_EQ(Get("/nodes", "plateau_token=root-token").status, 200);
}

TEST_F(WebServiceTest, TokensAreTakenOnlyWhereTheyMayTravel) {
  const HttpResponse response =
      Get("/jobs", "plateau_token=root-token", /*tokens_allowed=*/false);
  EXPECT_EQ(response.status, 403);
  EXPECT_THAT(response.body, HasSubstr("--allow_plaintext_tokens"));
}

TEST_F(WebServiceTest, TheStaticFilesAreBuiltIn) {
  const HttpResponse script = Get("/static/plateau.js");
  EXPECT_EQ(script.status, 200);
  EXPECT_EQ(script.content_type, "text/javascript; charset=utf-8");
  EXPECT_FALSE(script.body.empty());
  const HttpResponse chart = Get("/static/uPlot.iife.min.js");
  EXPECT_EQ(chart.status, 200);
  EXPECT_THAT(chart.body, HasSubstr("uPlot"));
  EXPECT_EQ(Get("/static/uPlot.min.css").content_type,
            "text/css; charset=utf-8");
  EXPECT_EQ(Get("/static/nothing.js").status, 404);
  // What browsers ask for unasked is no error.
  EXPECT_EQ(Get("/favicon.ico").status, 204);
}

}  // namespace
}  // namespace plateau::daemon
