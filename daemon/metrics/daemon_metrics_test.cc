#include "daemon/metrics/daemon_metrics.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace plateau::daemon {
namespace {

using testing::HasSubstr;
using testing::Not;

std::string Render(const DaemonMetrics& metrics) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, metrics.registry()->Collect());
  return out.str();
}

TEST(DaemonMetricsTest, RunningJobsAndUsersFollowTheLatestPass) {
  DaemonMetrics metrics;
  metrics.SetRunningJobs({{"j-1", "ada", 2}, {"j-2", "bob", 0}},
                         {{"ada", 4}, {"bob", 1}});
  std::string text = Render(metrics);
  EXPECT_THAT(text,
              HasSubstr("plateau_job_restarts{job=\"j-1\",owner=\"ada\"} 2"));
  EXPECT_THAT(text, HasSubstr("plateau_user_devices{user=\"bob\"} 1"));
  // j-2 ended: its series goes; bob holds nothing now and reads 0.
  metrics.SetRunningJobs({{"j-1", "ada", 3}}, {{"ada", 4}});
  text = Render(metrics);
  EXPECT_THAT(text,
              HasSubstr("plateau_job_restarts{job=\"j-1\",owner=\"ada\"} 3"));
  EXPECT_THAT(text, Not(HasSubstr("job=\"j-2\"")));
  EXPECT_THAT(text, HasSubstr("plateau_user_devices{user=\"bob\"} 0"));
  EXPECT_THAT(text, HasSubstr("plateau_user_devices{user=\"ada\"} 4"));
}

TEST(DaemonMetricsTest, DrainedNodesCarryTheirReasons) {
  DaemonMetrics metrics;
  metrics.SetDrainedNodes({{"node-a", "new NIC"}, {"node-b", ""}});
  std::string text = Render(metrics);
  EXPECT_THAT(text, HasSubstr("plateau_node_drained{node=\"node-a\",reason="
                              "\"new NIC\"} 1"));
  EXPECT_THAT(text,
              HasSubstr("plateau_node_drained{node=\"node-b\",reason=\"\"} 1"));
  // node-a resumed, node-b drained again for a reason: one series, new.
  metrics.SetDrainedNodes({{"node-b", "disk"}});
  text = Render(metrics);
  EXPECT_THAT(text, Not(HasSubstr("node=\"node-a\"")));
  EXPECT_THAT(text, Not(HasSubstr("reason=\"\"")));
  EXPECT_THAT(text, HasSubstr("plateau_node_drained{node=\"node-b\",reason="
                              "\"disk\"} 1"));
}

TEST(DaemonMetricsTest, OldestQueueWait) {
  DaemonMetrics metrics;
  EXPECT_THAT(Render(metrics),
              HasSubstr("plateau_queue_oldest_wait_seconds 0"));
  metrics.SetQueueOldestWait(90.5);
  EXPECT_THAT(Render(metrics),
              HasSubstr("plateau_queue_oldest_wait_seconds 90.5"));
}

}  // namespace
}  // namespace plateau::daemon
