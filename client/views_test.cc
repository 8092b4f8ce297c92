// Tests of job_view.h, describe_view.h and node_view.h.
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/describe_view.h"
#include "client/job_view.h"
#include "client/node_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMiB = 1024 * 1024;

void AddUsage(v1::RankMemory* rank, v1::MemoryPool pool,
              v1::MemoryComponent component, int64_t peak_bytes) {
  v1::MemoryUsage* usage = rank->add_usage();
  usage->set_pool(pool);
  usage->set_component(component);
  usage->set_peak_bytes(peak_bytes);
  usage->set_current_bytes(peak_bytes / 2);
}

v1::Job RunningJob() {
  v1::Job job;
  job.set_id("j-00000003");
  job.set_owner("ada");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_attempt(2);
  job.set_restarts(1);
  job.mutable_spec()->set_name("tiny-moe");
  job.mutable_spec()->mutable_train()->set_steps(300);
  job.set_spec_yaml("name: tiny-moe\ntrain: {steps: 300}\n");
  job.mutable_submit_time()->set_seconds(1795971792);
  v1::JobProgress* progress = job.mutable_progress();
  progress->set_step(120);
  progress->set_total_steps(300);
  progress->set_loss(4.213);
  progress->set_tokens_per_second(1843.4);
  progress->set_tokens_total(245760);
  progress->set_checkpoint_step(100);
  progress->set_checkpoint_location("runs/tiny-moe/step-100");
  v1::RankMemory* rank0 = job.add_memory();
  rank0->set_rank(0);
  rank0->set_device_capacity_bytes(2048 * kMiB);
  AddUsage(rank0, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_WEIGHTS,
           100 * kMiB);
  // Host peaks are larger but never the device peak.
  AddUsage(rank0, v1::MEMORY_POOL_HOST, v1::MEMORY_COMPONENT_OPTIMIZER,
           900 * kMiB);
  v1::RankMemory* rank1 = job.add_memory();
  rank1->set_rank(1);
  rank1->set_device_capacity_bytes(2048 * kMiB);
  AddUsage(rank1, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_DISPATCH,
           155 * kMiB);
  AddUsage(rank1, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_ACTIVATIONS, 0);
  return job;
}

TEST(JobViewTest, LargestDevicePeakIsOverRanksAndComponents) {
  std::optional<DevicePeak> peak = LargestDevicePeak(RunningJob());
  ASSERT_TRUE(peak.has_value());
  EXPECT_EQ(peak->rank, 1);
  EXPECT_EQ(peak->component, v1::MEMORY_COMPONENT_DISPATCH);
  EXPECT_EQ(peak->bytes, 155 * kMiB);
}

TEST(JobViewTest, NoDevicePeakWithoutDeviceReports) {
  v1::Job job;
  EXPECT_FALSE(LargestDevicePeak(job).has_value());
  v1::RankMemory* rank = job.add_memory();
  AddUsage(rank, v1::MEMORY_POOL_HOST, v1::MEMORY_COMPONENT_STAGING, kMiB);
  AddUsage(rank, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_WEIGHTS, 0);
  EXPECT_FALSE(LargestDevicePeak(job).has_value());
}

TEST(JobViewTest, ProgressLineShowsStepLossThroughputAndPeak) {
  EXPECT_EQ(ProgressLine(RunningJob()),
            "j-00000003 RUNNING [########............] 120/300  loss 4.2130  "
            "1843 tok/s  peak 155.00 MiB (dispatch)");
}

TEST(JobViewTest, ProgressLineOfAQueuedJobEndsWithItsWaitReason) {
  v1::Job job;
  job.set_id("j-00000004");
  job.set_state(v1::JOB_STATE_QUEUED);
  job.mutable_spec()->mutable_train()->set_steps(10);
  job.set_wait_reason("behind job j-00000003");
  EXPECT_EQ(ProgressLine(job),
            "j-00000004 QUEUED [....................] 0/10  (behind job "
            "j-00000003)");
  EXPECT_EQ(StateLine(job), "j-00000004 QUEUED (behind job j-00000003)");
}

TEST(JobViewTest, FinalLineAddsTheError) {
  v1::Job job = RunningJob();
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_last_error("rank 1 ran out of device memory");
  EXPECT_THAT(FinalLine(job), HasSubstr("j-00000003 FAILED ["));
  EXPECT_THAT(FinalLine(job),
              HasSubstr("  error: rank 1 ran out of device memory"));
}

TEST(JobViewTest, ProgressCell) {
  EXPECT_EQ(ProgressCell(RunningJob()), "120/300 (40%)");
  EXPECT_EQ(ProgressCell(v1::Job()), "-");
}

TEST(JobViewTest, EventAndWorkerLines) {
  v1::JobEvent event;
  event.mutable_time()->set_seconds(1795971792);
  event.set_kind(v1::JOB_EVENT_KIND_SCHEDULED);
  event.set_message("on node-a");
  EXPECT_EQ(EventLine(event),
            "[2026-11-29 17:03:12Z] EVENT SCHEDULED: on node-a");
  event.clear_message();
  EXPECT_EQ(EventLine(event), "[2026-11-29 17:03:12Z] EVENT SCHEDULED");
  v1::WorkerLogLine line;
  line.set_node("node-a");
  line.set_rank(1);
  line.set_text("step 10 loss 5.1\n");
  EXPECT_EQ(WorkerLine(line), "[node-a rank 1] step 10 loss 5.1");
}

TEST(JobViewTest, JobsTable) {
  v1::ListJobsResponse response;
  *response.add_jobs() = RunningJob();
  const absl::Time now = absl::FromUnixSeconds(1795971792 + 330);
  EXPECT_EQ(JobsTable(response.jobs(), now),
            "ID          NAME      OWNER  STATE    PROGRESS       AGE\n"
            "j-00000003  tiny-moe  ada    RUNNING  120/300 (40%)  5m\n");
}

TEST(DescribeViewTest, ShowsEverySection) {
  v1::Job job = RunningJob();
  v1::NodeAllocation* node = job.mutable_allocation()->add_nodes();
  job.mutable_allocation()->set_world_size(2);
  node->set_node("node-a");
  node->add_device_indices(0);
  node->add_device_indices(1);
  node->set_first_rank(0);
  v1::JobEvent event;
  event.mutable_time()->set_seconds(1795971792);
  event.set_kind(v1::JOB_EVENT_KIND_SUBMITTED);
  event.set_state(v1::JOB_STATE_QUEUED);
  event.set_attempt(0);
  event.set_message("submitted by ada");
  const std::string text = DescribeJob(job, {event});
  EXPECT_THAT(text, HasSubstr("ID:             j-00000003\n"));
  EXPECT_THAT(text, HasSubstr("State:          RUNNING\n"));
  EXPECT_THAT(text, HasSubstr("Attempt:        2 (1 restart)\n"));
  EXPECT_THAT(text, HasSubstr("Submitted:      2026-11-29 17:03:12Z\n"));
  EXPECT_THAT(text, HasSubstr("Started:        -\n"));
  EXPECT_THAT(text, HasSubstr("  node-a: devices 0,1  ranks 0-1\n"));
  EXPECT_THAT(text, HasSubstr("Progress:       120/300 (40%)\n"));
  EXPECT_THAT(text, HasSubstr("loss 4.2130"));
  EXPECT_THAT(text, HasSubstr("1843 tok/s  245760 tokens in total"));
  EXPECT_THAT(text,
              HasSubstr("checkpoint at step 100: runs/tiny-moe/step-100"));
  EXPECT_THAT(text, HasSubstr("  rank 0 (device capacity 2.00 GiB):\n"));
  EXPECT_THAT(text, HasSubstr("    device  weights    100.00 MiB\n"));
  EXPECT_THAT(text, HasSubstr("    host    optimizer  900.00 MiB\n"));
  EXPECT_THAT(text, Not(HasSubstr("activations")));  // zero peak
  EXPECT_THAT(
      text,
      HasSubstr("  largest device peak: dispatch 155.00 MiB on rank 1\n"));
  EXPECT_THAT(text,
              HasSubstr("SUBMITTED  QUEUED  0        submitted by ada\n"));
  EXPECT_THAT(text,
              HasSubstr("Spec:\n  name: tiny-moe\n  train: {steps: 300}\n"));
  job.set_preemptions(2);
  EXPECT_THAT(DescribeJob(job, {event}),
              HasSubstr("Attempt:        2 (1 restart, 2 preemptions)\n"));
}

TEST(DescribeViewTest, QueuedJobShowsItsWaitReason) {
  v1::Job job;
  job.set_id("j-1");
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_wait_reason("behind job j-0");
  job.set_spec_yaml("name: x\n");
  const std::string text = DescribeJob(job, {});
  EXPECT_THAT(text, HasSubstr("State:          QUEUED (behind job j-0)\n"));
  EXPECT_THAT(text, HasSubstr("Memory peaks:   none reported\n"));
  EXPECT_THAT(text, HasSubstr("History:        none\n"));
  EXPECT_THAT(text, HasSubstr("Memory plan:    none (no node's device "
                              "memory was known at submit)\n"));
  job.set_queue_position(2);
  EXPECT_THAT(DescribeJob(job, {}),
              HasSubstr("State:          QUEUED, position 2 (behind job "
                        "j-0)\n"));
}

// What the products run in and why: precision: auto until the first
// attempt chooses, then the choice with its reason.
TEST(DescribeViewTest, ShowsThePrecisionAndWhy) {
  v1::Job job;
  job.set_id("j-1");
  job.set_state(v1::JOB_STATE_QUEUED);
  EXPECT_THAT(DescribeJob(job, {}),
              HasSubstr("Precision:      auto (chosen at its first "
                        "attempt)\n"));
  job.mutable_plan()->set_fits(true);
  EXPECT_THAT(DescribeJob(job, {}),
              HasSubstr("Precision:      auto (chosen at its first attempt; "
                        "it fits only in bf16)\n"));
  job.mutable_fp32_alternative()->mutable_plan()->set_fits(true);
  EXPECT_THAT(DescribeJob(job, {}), HasSubstr("else fp32; it fits in "
                                              "either)\n"));
  job.clear_fp32_alternative();
  job.mutable_spec()->set_precision(v1::PRECISION_FP32);
  job.set_precision_reason("auto: bf16 products 0.96x fp32's on node-a");
  EXPECT_THAT(DescribeJob(job, {}),
              HasSubstr("Precision:      fp32 (auto: bf16 products 0.96x "
                        "fp32's on node-a)\n"));
  job.clear_precision_reason();
  job.mutable_spec()->set_precision(v1::PRECISION_BF16);
  EXPECT_THAT(DescribeJob(job, {}),
              HasSubstr("Precision:      bf16 (set in the spec)\n"));
}

TEST(JobViewTest, QueueTableFollowsThePositions) {
  v1::ListJobsResponse response;
  const auto add = [&](const std::string& id, int position, int priority,
                       const std::string& reason, int submitted_at = 0) {
    v1::Job& job = *response.add_jobs();
    job.set_id(id);
    job.mutable_submit_time()->set_seconds(submitted_at);
    job.set_state(v1::JOB_STATE_QUEUED);
    job.set_owner("ada");
    job.mutable_spec()->set_name("run-" + id);
    job.mutable_spec()->set_priority(priority);
    job.mutable_spec()->mutable_resources()->set_nodes(1);
    job.mutable_spec()->mutable_resources()->set_devices_per_node(2);
    job.mutable_queue_time()->set_seconds(1000);
    job.set_queue_position(position);
    job.set_wait_reason(reason);
  };
  add("j-3", 2, 50, "behind job j-2 (start time unknown)");
  // Not placed yet: last, the older first whatever their (random) ids.
  add("j-k", 0, 50, "", 20);
  add("j-x", 0, 50, "", 10);
  add("j-2", 1, 90, "waiting for 2 devices on 1 node; 0 free");
  response.add_jobs()->set_state(v1::JOB_STATE_RUNNING);  // not queued
  EXPECT_EQ(QueueTable(response.jobs(), absl::FromUnixSeconds(1065)),
            "POS  ID   NAME     OWNER  PRIORITY  DEVICES  WAITING  WHY\n"
            "1    j-2  run-j-2  ada    90        1x2      1m       waiting for "
            "2 devices on 1 node; 0 free\n"
            "2    j-3  run-j-3  ada    50        1x2      1m       behind job "
            "j-2 (start time unknown)\n"
            "-    j-x  run-j-x  ada    50        1x2      1m       -\n"
            "-    j-k  run-j-k  ada    50        1x2      1m       -\n");
}

TEST(DescribeViewTest, ShowsThePlanMadeAtAdmission) {
  v1::Job job = RunningJob();
  v1::MemoryPlan& plan = *job.mutable_plan();
  plan.set_device_memory_bytes(2048 * kMiB);
  plan.set_margin(0.05);
  plan.set_devices(2);
  plan.set_fits(true);
  plan.set_schedules_chosen(true);
  plan.mutable_planned()->set_schedules("ring_dtp, sco");
  plan.mutable_planned()->set_device_peak_bytes(512 * kMiB);
  plan.mutable_planned()->set_binding_component(v1::MEMORY_COMPONENT_ATTENTION);
  v1::RankPrediction* rank = plan.mutable_planned()->add_ranks();
  v1::PredictedPeak* peak = rank->add_peaks();
  peak->set_pool(v1::MEMORY_POOL_DEVICE);
  peak->set_component(v1::MEMORY_COMPONENT_ATTENTION);
  peak->set_peak_bytes(300 * kMiB);
  const std::string text = DescribeJob(job, {});
  EXPECT_THAT(text, HasSubstr("Memory plan:\n  fits: yes, planned peak "
                              "512.00 MiB of 1.90 GiB usable (2 devices of "
                              "2.00 GiB)\n  binds first: attention\n"
                              "  schedules: ring_dtp, sco (chosen by the "
                              "planner)\n"));
  EXPECT_THAT(text, HasSubstr("  attention         0 B"));
  EXPECT_THAT(text, HasSubstr("300.00 MiB  14.6%\n"));
}

TEST(NodeViewTest, NodesTable) {
  v1::ListNodesResponse response;
  v1::Node* node = response.add_nodes();
  node->set_name("node-a");
  node->set_state(v1::NODE_STATE_READY);
  node->set_host_memory_bytes(int64_t{16} * 1024 * kMiB);
  node->set_metrics_address("127.0.0.1:9401");
  node->mutable_last_heartbeat()->set_seconds(1000);
  for (int i = 0; i < 3; ++i) {
    v1::Device* device = node->add_devices();
    device->set_index(i);
    device->set_kind(v1::DEVICE_KIND_CPU);
    device->set_memory_bytes(2048 * kMiB);
    device->set_allocated(i < 2);
    if (i < 2) device->set_allocated_job_id(i == 0 ? "j-2" : "j-1");
  }
  EXPECT_EQ(NodesTable(response.nodes(), absl::FromUnixSeconds(1003)),
            "NAME    STATE  DEVICES  DEVICE MEMORY  HOST MEMORY  JOBS     "
            "HEARTBEAT  METRICS\n"
            "node-a  READY  1/3 cpu  2.00 GiB       16.00 GiB    j-1,j-2  3s "
            "        127.0.0.1:9401\n");
  // Another user's job: the device is taken, whose it is is not said.
  node->mutable_devices(0)->clear_allocated_job_id();
  node->mutable_devices(2)->set_allocated(true);
  EXPECT_EQ(NodesTable(response.nodes(), absl::FromUnixSeconds(1003)),
            "NAME    STATE  DEVICES  DEVICE MEMORY  HOST MEMORY  JOBS         "
            "HEARTBEAT  METRICS\n"
            "node-a  READY  0/3 cpu  2.00 GiB       16.00 GiB    j-1,2 other  "
            "3s         127.0.0.1:9401\n");
  // A drained node says why.
  node->set_state(v1::NODE_STATE_DRAINING);
  node->set_drain_reason("new NIC");
  EXPECT_EQ(NodeStateCell(*node), "DRAINING (new NIC)");
  EXPECT_THAT(NodesTable(response.nodes(), absl::FromUnixSeconds(1003)),
              HasSubstr("node-a  DRAINING (new NIC)  0/3 cpu"));
}

}  // namespace
}  // namespace plateau::client
