#include "daemon/jobs/job_summary.h"

#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

TEST(JobSummaryTest, KeepsWhatARowShowsAndDropsWhatAUserSizes) {
  v1::Job job;
  job.set_id("j-00000007");
  job.mutable_spec()->set_name("big");
  job.mutable_spec()->set_priority(70);
  job.mutable_spec()->mutable_resources()->set_nodes(2);
  job.mutable_spec()->mutable_resources()->set_devices_per_node(4);
  job.mutable_spec()->mutable_train()->set_steps(300);
  job.mutable_spec()->mutable_data()->set_path(std::string(4096, 'p'));
  job.set_spec_yaml(std::string(60'000, '#'));
  job.set_owner("ada");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_attempt(2);
  job.set_restarts(1);
  job.set_preemptions(1);
  job.mutable_submit_time()->set_seconds(100);
  job.mutable_queue_time()->set_seconds(110);
  job.mutable_progress()->set_step(42);
  job.set_last_error("rank 1 exited 9");
  job.mutable_allocation()->set_world_size(8);
  job.set_wait_reason("");
  job.set_log_lines(12);
  job.set_precision_reason("set in the spec");
  job.add_memory()->set_rank(0);
  job.mutable_plan()->set_fits(true);
  job.mutable_fp32_alternative()->set_spec_yaml("name: big");
  job.add_finished_nodes("node-a");
  job.add_recent_preemption_times()->set_seconds(105);
  job.set_idempotency_key("key");

  const v1::Job summary = JobSummary(job);
  EXPECT_EQ(summary.id(), "j-00000007");
  EXPECT_EQ(summary.spec().name(), "big");
  EXPECT_EQ(summary.spec().priority(), 70);
  EXPECT_EQ(summary.spec().resources().nodes(), 2);
  EXPECT_EQ(summary.spec().resources().devices_per_node(), 4);
  EXPECT_EQ(summary.spec().train().steps(), 300);
  EXPECT_EQ(summary.owner(), "ada");
  EXPECT_EQ(summary.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(summary.attempt(), 2);
  EXPECT_EQ(summary.restarts(), 1);
  EXPECT_EQ(summary.preemptions(), 1);
  EXPECT_EQ(summary.submit_time().seconds(), 100);
  EXPECT_EQ(summary.queue_time().seconds(), 110);
  EXPECT_EQ(summary.progress().step(), 42);
  EXPECT_EQ(summary.last_error(), "rank 1 exited 9");
  EXPECT_EQ(summary.allocation().world_size(), 8);
  EXPECT_EQ(summary.log_lines(), 12);
  EXPECT_EQ(summary.precision_reason(), "set in the spec");

  EXPECT_FALSE(summary.spec().has_data());
  EXPECT_EQ(summary.spec_yaml(), "");
  EXPECT_EQ(summary.memory_size(), 0);
  EXPECT_FALSE(summary.has_plan());
  EXPECT_FALSE(summary.has_fp32_alternative());
  EXPECT_EQ(summary.finished_nodes_size(), 0);
  EXPECT_EQ(summary.recent_preemption_times_size(), 0);
  EXPECT_EQ(summary.idempotency_key(), "");
  EXPECT_LT(summary.ByteSizeLong(), 200u);
}

}  // namespace
}  // namespace plateau::daemon
