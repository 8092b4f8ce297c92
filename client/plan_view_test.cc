// Tests of plan_view.h.
#include "client/plan_view.h"

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace plateau::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kGiB = 1024 * kMiB;

void AddPeak(v1::RankPrediction* rank, v1::MemoryPool pool,
             v1::MemoryComponent component, int64_t bytes) {
  v1::PredictedPeak* peak = rank->add_peaks();
  peak->set_pool(pool);
  peak->set_component(component);
  peak->set_peak_bytes(bytes);
}

// Two ranks; the worst is rank 1 without schedules (dispatch binds) and
// rank 0 with them (weights bind).
v1::MemoryPlan SamplePlan() {
  v1::MemoryPlan plan;
  plan.set_device_memory_bytes(2 * kGiB);
  plan.set_routing_skew(1.5);
  plan.set_margin(0.05);
  plan.set_devices(2);
  plan.set_fits(true);
  plan.set_schedules_chosen(true);
  plan.set_explanation("dispatch binds without schedules; chunking fixes it.");
  plan.set_max_seq_len(4096);
  plan.set_max_batch_tokens(65536);
  plan.set_baseline_max_seq_len(512);
  plan.set_baseline_max_batch_tokens(0);
  plan.set_node_host_bytes(500 * kMiB);
  plan.set_node_checkpoint_bytes(2 * kGiB);
  plan.set_checkpoint_write_bytes_per_second(kGiB);
  plan.set_node_checkpoint_write_seconds(2.0);
  plan.set_stop_checkpoint_write_seconds(4.0);

  v1::MemoryPrediction* baseline = plan.mutable_baseline();
  baseline->set_schedules("none");
  baseline->set_worst_rank(1);
  baseline->set_device_peak_bytes(3 * kGiB);
  baseline->set_host_peak_bytes(200 * kMiB);
  baseline->set_binding_component(v1::MEMORY_COMPONENT_DISPATCH);
  baseline->set_peak_phase("backward, layer 1");
  v1::RankPrediction* rank0 = baseline->add_ranks();
  rank0->set_rank(0);
  AddPeak(rank0, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_DISPATCH,
          10 * kMiB);
  v1::RankPrediction* rank1 = baseline->add_ranks();
  rank1->set_rank(1);
  AddPeak(rank1, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_WEIGHTS,
          512 * kMiB);
  AddPeak(rank1, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_DISPATCH,
          2 * kGiB);
  // Host peaks never show in the device table.
  AddPeak(rank1, v1::MEMORY_POOL_HOST, v1::MEMORY_COMPONENT_DISPATCH, 7);

  plan.set_precision("bf16");
  v1::MemoryPrediction* planned = plan.mutable_planned();
  planned->set_schedules("dispatch_chunk_tokens 1024, ring_dtp");
  planned->set_worst_rank(0);
  planned->set_device_peak_bytes(1 * kGiB);
  planned->set_host_peak_bytes(300 * kMiB);
  planned->set_binding_component(v1::MEMORY_COMPONENT_WEIGHTS);
  planned->set_peak_phase("optimizer step");
  v1::RankPrediction* planned0 = planned->add_ranks();
  planned0->set_rank(0);
  AddPeak(planned0, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_WEIGHTS,
          512 * kMiB);
  AddPeak(planned0, v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_DISPATCH,
          64 * kMiB);
  return plan;
}

TEST(PlanViewTest, ReportHasHeaderSchedulesTableBindingFitsAndReach) {
  const std::string text = PlanReport("tiny-moe", SamplePlan());
  EXPECT_THAT(text, HasSubstr("plan for tiny-moe: 2 devices of 2.00 GiB, "
                              "margin 5%, routing skew 1.5\n"));
  EXPECT_THAT(text, HasSubstr("precision: bf16\nschedules: "
                              "dispatch_chunk_tokens 1024, ring_dtp "
                              "(chosen by the planner)\n"));
  v1::MemoryPlan stored = SamplePlan();
  stored.set_routing_skew(0.0);
  EXPECT_THAT(PlanReport("tiny-moe", stored),
              HasSubstr("margin 5%, worst-case routing (every token on the "
                        "same experts)\n"));
  stored.set_bf16_weight_storage(true);
  EXPECT_THAT(PlanReport("tiny-moe", stored),
              HasSubstr("precision: bf16, product weights and embedding stored "
                        "in bf16 "
                        "(float32 masters on the host)\nschedules: "));
  stored.set_bf16_gradients(true);
  EXPECT_THAT(PlanReport("tiny-moe", stored),
              HasSubstr("precision: bf16, product weights and embedding stored "
                        "in bf16 "
                        "(float32 masters on the host), their gradients "
                        "accumulated in bf16\nschedules: "));
  stored.set_bf16_weight_storage(false);
  stored.set_bf16_gradients(false);
  stored.set_precision("fp32");
  stored.set_precision_reason("auto: bf16 products 0.96x fp32's on node-a");
  EXPECT_THAT(PlanReport("tiny-moe", stored),
              HasSubstr("precision: fp32 (auto: bf16 products 0.96x fp32's "
                        "on node-a)\nschedules: "));
  EXPECT_THAT(text, HasSubstr("worst rank (baseline: rank 1, planned: "
                              "rank 0)"));
  EXPECT_THAT(text,
              HasSubstr("COMPONENT         BASELINE    SHARE   PLANNED     "
                        "SHARE\n"));
  // Each prediction's worst rank, not the other ranks.
  EXPECT_THAT(text, HasSubstr("weights           512.00 MiB  25.0%  "));
  EXPECT_THAT(text, HasSubstr("dispatch          2.00 GiB    100.0%  "
                              "64.00 MiB   3.1%\n"));
  EXPECT_THAT(text, HasSubstr("vocab_projection  0 B         0.0%    0 B"));
  EXPECT_THAT(text, HasSubstr("other "));
  EXPECT_THAT(text, HasSubstr("device peak       3.00 GiB    150.0%  "
                              "1.00 GiB    50.0%\n"));
  EXPECT_THAT(text, HasSubstr("host peak         200.00 MiB  -       "
                              "300.00 MiB  -\n"));
  EXPECT_THAT(text, HasSubstr("binds first (baseline): dispatch (at "
                              "backward, layer 1)\n"));
  EXPECT_THAT(text, HasSubstr("binds first (planned):  weights (at "
                              "optimizer step)\n"));
  EXPECT_THAT(text, HasSubstr("fits: yes, planned peak 1.00 GiB of 1.90 GiB "
                              "usable\nhost memory of rank 0's node: up to "
                              "500.00 MiB\ncheckpoint write: up to 2.00 GiB "
                              "a node, about 2.0 s at 1.00 GiB/s\n"
                              "max seq_len"));
  // Planned by plateaud, whose stop grace a stop's two writes outlast.
  EXPECT_THAT(text, Not(HasSubstr("warning:")));
  stored = SamplePlan();
  stored.set_stop_grace_seconds(3);
  EXPECT_THAT(PlanReport("tiny-moe", stored),
              HasSubstr("warning: a stop or preemption writes checkpoints for "
                        "up to 4.0 s (the write in flight, then its own), but "
                        "plateaud's --stop_grace_period is 3 s"));
  stored.set_stop_grace_seconds(30);
  EXPECT_THAT(PlanReport("tiny-moe", stored), Not(HasSubstr("warning:")));
  EXPECT_THAT(text, Not(HasSubstr("dispatch binds without")));
  EXPECT_THAT(text, HasSubstr("max seq_len:      4096 (baseline 512)\n"));
  EXPECT_THAT(text,
              HasSubstr("max batch_tokens: 65536 (baseline none fits)\n"));
}

TEST(PlanViewTest, ReportOfAJobThatDoesNotFit) {
  v1::MemoryPlan plan = SamplePlan();
  plan.set_fits(false);
  plan.set_schedules_chosen(false);
  plan.mutable_planned()->set_device_peak_bytes(3 * kGiB);
  plan.set_explanation("dispatch binds: 3.00 GiB of 1.90 GiB usable.");
  const std::string text = PlanReport("big", plan);
  EXPECT_THAT(text, Not(HasSubstr("chosen by the planner")));
  EXPECT_THAT(text, HasSubstr("fits: no, planned peak 3.00 GiB exceeds "
                              "1.90 GiB usable (95% of 2.00 GiB)\n"
                              "dispatch binds: 3.00 GiB"));
}

TEST(PlanViewTest, UnknownDeviceSizeAndMissingRanksStillPrint) {
  v1::MemoryPlan plan;
  plan.set_devices(1);
  const std::string text = PlanReport("x", plan);
  EXPECT_THAT(text, HasSubstr("plan for x: 1 device of 0 B"));
  EXPECT_THAT(text, HasSubstr("schedules: none\n"));
  EXPECT_THAT(text, HasSubstr("weights           0 B       -      0 B"));
  EXPECT_THAT(text, HasSubstr("binds first (baseline): unspecified\n"));
}

TEST(PlanViewTest, SummaryIsCompact) {
  const std::string text = PlanSummary(SamplePlan());
  EXPECT_THAT(text, HasSubstr("fits: yes, planned peak 1.00 GiB of 1.90 GiB "
                              "usable (2 devices of 2.00 GiB)\n"
                              "binds first: weights (at optimizer step)\n"
                              "precision: bf16\n"
                              "schedules: dispatch_chunk_tokens 1024, "
                              "ring_dtp (chosen by the planner)\n"));
  EXPECT_THAT(text, HasSubstr("dispatch          2.00 GiB"));
  EXPECT_THAT(text, Not(HasSubstr("max seq_len")));
  EXPECT_THAT(text, Not(HasSubstr("dispatch binds without")));  // fits
}

TEST(PlanViewTest, JsonHoldsThePlanAndTheSchedules) {
  v1::ScheduleSpec schedules;
  schedules.set_dispatch_chunk_tokens(1024);
  schedules.set_ring_dtp(true);
  schedules.set_auto_(true);
  absl::StatusOr<std::string> json = PlanJson(SamplePlan(), schedules);
  ASSERT_TRUE(json.ok()) << json.status();
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &parsed).ok())
      << *json;
  EXPECT_EQ(json->rfind("{\n \"plan\": {\n  \"device_memory_bytes\"", 0), 0u)
      << *json;
  const auto& fields = parsed.fields();
  ASSERT_EQ(fields.count("plan"), 1u);
  ASSERT_EQ(fields.count("schedules"), 1u);
  const auto& plan = fields.at("plan").struct_value().fields();
  EXPECT_TRUE(plan.at("fits").bool_value());
  EXPECT_EQ(plan.at("device_memory_bytes").string_value(),
            std::to_string(2 * kGiB));
  EXPECT_EQ(plan.at("planned")
                .struct_value()
                .fields()
                .at("binding_component")
                .string_value(),
            "MEMORY_COMPONENT_WEIGHTS");
  const auto& chosen = fields.at("schedules").struct_value().fields();
  EXPECT_EQ(chosen.at("dispatch_chunk_tokens").string_value(), "1024");
  EXPECT_TRUE(chosen.at("ring_dtp").bool_value());
  EXPECT_TRUE(chosen.at("auto").bool_value());
  EXPECT_EQ(json->back(), '\n');
}

}  // namespace
}  // namespace plateau::client
