#include "daemon/web/web_pages.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHostile[] = "<script>alert('x')</script> & \"more\"";

v1::Job HostileJob() {
  v1::Job job;
  job.set_id("j-00000007");
  job.set_owner("ada");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_attempt(1);
  job.mutable_spec()->set_name(kHostile);
  job.set_last_error(kHostile);
  job.mutable_spec()->mutable_resources()->set_nodes(1);
  job.mutable_spec()->mutable_resources()->set_devices_per_node(2);
  job.mutable_progress()->set_step(12);
  job.mutable_progress()->set_total_steps(300);
  job.mutable_progress()->set_loss(5.4321);
  return job;
}

TEST(WebPagesTest, EveryStringFromOutsideIsEscaped) {
  EXPECT_EQ(HtmlEscape(kHostile),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; "
            "&quot;more&quot;");
  const std::string jobs = JobsHtml({HostileJob()}, "ada");
  EXPECT_THAT(jobs, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(jobs, HasSubstr("&lt;script&gt;alert"));
  EXPECT_THAT(jobs, HasSubstr("<td>12/300</td><td>5.4321</td>"));
  EXPECT_THAT(jobs, HasSubstr("<span class=\"state state-running\">RUNNING"));

  v1::JobEvent event;
  event.set_kind(v1::JOB_EVENT_KIND_ATTEMPT_FAILED);
  event.set_attempt(1);
  event.set_message(kHostile);
  v1::ProgressSample sample;
  sample.set_step(12);
  sample.set_loss(5.4321);
  const std::string page = JobHtml(HostileJob(), {event}, {sample}, kHostile);
  EXPECT_THAT(page, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(page, HasSubstr("<td>ATTEMPT_FAILED</td><td>1</td><td>&lt;"));
  // The one script element of data cannot be closed from inside: no "</"
  // before its end.
  const size_t data = page.find("<script type=\"application/json\"");
  ASSERT_NE(data, std::string::npos);
  const size_t end = page.find("</script>", data);
  EXPECT_EQ(page.find("</", data), end);
  EXPECT_THAT(
      page.substr(data),
      HasSubstr("\"samples\":[{\"attempt\":0,\"component_peak_bytes\""));
}

TEST(WebPagesTest, EachRankIsAStackedBarOfItsComponentsPeaks) {
  v1::Job job = HostileJob();
  v1::RankMemory& rank = *job.add_memory();
  rank.set_rank(1);
  rank.set_device_capacity_bytes(1000);
  rank.set_device_peak_bytes(600);
  for (const auto& [component, peak] :
       std::vector<std::pair<v1::MemoryComponent, int64_t>>{
           {v1::MEMORY_COMPONENT_WEIGHTS, 250},
           {v1::MEMORY_COMPONENT_ACTIVATIONS, 400}}) {
    v1::MemoryUsage& usage = *rank.add_usage();
    usage.set_pool(v1::MEMORY_POOL_DEVICE);
    usage.set_component(component);
    usage.set_peak_bytes(peak);
  }
  v1::MemoryUsage& host = *rank.add_usage();
  host.set_pool(v1::MEMORY_POOL_HOST);
  host.set_component(v1::MEMORY_COMPONENT_OPTIMIZER);
  host.set_peak_bytes(5000);
  const std::string page = JobHtml(job, {}, {}, "ada");
  EXPECT_THAT(page, HasSubstr("rank 1</span>"));
  // Widths are shares of the capacity; host memory is not in the bar.
  EXPECT_THAT(page, HasSubstr("<div class=\"segment component-weights\" "
                              "style=\"width:25.00%\""));
  EXPECT_THAT(page, HasSubstr("<div class=\"segment component-activations\" "
                              "style=\"width:40.00%\""));
  EXPECT_THAT(page, Not(HasSubstr("segment component-optimizer")));
  EXPECT_THAT(page, HasSubstr("<li><span class=\"swatch "
                              "component-weights\"></span>weights</li>"));
  EXPECT_THAT(JobHtml(HostileJob(), {}, {}, "ada"),
              HasSubstr("No memory reported yet."));
}

TEST(WebPagesTest, NodesShowOnlyTheJobsTheCallerMaySee) {
  v1::Node node;
  node.set_name("node-a");
  node.set_state(v1::NODE_STATE_DRAINING);
  node.set_drain_reason("new NIC");
  for (const char* holder : {"j-00000001", "", ""}) {
    v1::Device& device = *node.add_devices();
    device.set_memory_bytes(int64_t{1} << 30);
    device.set_allocated(true);
    device.set_allocated_job_id(holder);
  }
  node.add_devices()->set_memory_bytes(int64_t{1} << 30);
  const std::string page = NodesHtml({node}, "ada", absl::Now());
  EXPECT_THAT(page, HasSubstr("node-state-draining\">DRAINING</span> (new "
                              "NIC)</td><td>1 of 4 free</td><td>1.00 GiB"));
  EXPECT_THAT(page, HasSubstr("<a href=\"/jobs/j-00000001\">j-00000001</a>, 2 "
                              "devices of other users' jobs"));
}

TEST(WebPagesTest, TheSignInFormSaysWhatWentWrong) {
  EXPECT_THAT(LoginHtml(""), Not(HasSubstr("class=\"error\"")));
  const std::string page = LoginHtml("That <token> is not a user's.");
  EXPECT_THAT(page, HasSubstr("<p class=\"error\">That &lt;token&gt;"));
  EXPECT_THAT(page, HasSubstr("<form id=\"login-form\" method=\"post\" "
                              "action=\"/login\">"));
}

}  // namespace
}  // namespace plateau::daemon
