#include "daemon/admission/admission.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job_spec.h"

namespace plateau::daemon {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// A small MoE on 2 devices of one node (as in the service's end-to-end
// test); `schedules` is the YAML value of the schedules section.
std::string SpecYaml(const std::string& schedules,
                     const std::string& model_extra = "") {
  return absl::StrCat(
      "name: admitted\n"
      "resources: {nodes: 1, devices_per_node: 2}\n"
      "model: {layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,\n"
      "        ffn_hidden: 128, vocab: 320, seq_len: 64",
      model_extra,
      "}\n"
      "parallel: {ep: 2, pp: 1, dp: 1}\n"
      "schedules: ",
      schedules,
      "\n"
      "optimizer: {kind: adamw, lr: 1.0e-2}\n"
      "data: {path: data/x, batch_tokens: 1024}\n"
      "train: {steps: 10}\n");
}

v1::JobSpec Parse(const std::string& yaml) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::JobSpec());
}

// Registered nodes whose largest devices (with the job's devices per node)
// have `memory_bytes` each.
AdmissionDevices Devices(int64_t memory_bytes) {
  AdmissionDevices devices;
  devices.any_node = true;
  devices.device_memory_bytes = memory_bytes;
  return devices;
}

TEST(AdmissionTest, AJobThatFitsGetsItsPlanAndKeepsItsSpec) {
  const std::string yaml = SpecYaml("{ring_dtp: true}");
  const v1::JobSpec spec = Parse(yaml);
  absl::StatusOr<AdmittedJob> admitted = AdmitJob(spec, yaml, Devices(kGiB));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(admitted->plan.has_value());
  EXPECT_TRUE(admitted->plan->fits());
  EXPECT_FALSE(admitted->plan->schedules_chosen());
  EXPECT_EQ(admitted->plan->device_memory_bytes(), kGiB);
  EXPECT_EQ(admitted->plan->devices(), 2);
  EXPECT_GT(admitted->plan->planned().device_peak_bytes(), 0);
  EXPECT_EQ(admitted->spec.SerializeAsString(), spec.SerializeAsString());
  EXPECT_EQ(admitted->spec_yaml, yaml);  // the user's text, comments and all
}

// precision: auto (the spec leaves it out) is planned in bf16, its least
// memory, and in fp32 for a first attempt that chooses it.
TEST(AdmissionTest, AutoPrecisionIsPlannedInBothPrecisions) {
  const std::string yaml = SpecYaml("{ring_dtp: true}");
  const v1::JobSpec spec = Parse(yaml);
  ASSERT_EQ(spec.precision(), v1::PRECISION_UNSPECIFIED);
  absl::StatusOr<AdmittedJob> admitted = AdmitJob(spec, yaml, Devices(kGiB));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(admitted->plan.has_value());
  EXPECT_EQ(admitted->plan->precision(), "bf16");
  EXPECT_THAT(admitted->plan->precision_reason(),
              HasSubstr("until its first attempt chooses"));
  EXPECT_EQ(admitted->spec.precision(), v1::PRECISION_UNSPECIFIED);
  ASSERT_TRUE(admitted->fp32_alternative.has_value());
  const v1::PlannedSpec& fp32 = *admitted->fp32_alternative;
  EXPECT_EQ(fp32.spec().precision(), v1::PRECISION_FP32);
  EXPECT_EQ(fp32.plan().precision(), "fp32");
  EXPECT_TRUE(fp32.plan().fits());
  EXPECT_GT(fp32.plan().planned().device_peak_bytes(),
            admitted->plan->planned().device_peak_bytes());
  EXPECT_EQ(fp32.spec_yaml(), yaml);  // schedules pinned: the user's text
  // A spec that sets its precision is planned in it alone.
  const std::string set = yaml + "precision: bf16\n";
  absl::StatusOr<AdmittedJob> bf16 = AdmitJob(Parse(set), set, Devices(kGiB));
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_FALSE(bf16->fp32_alternative.has_value());
  EXPECT_TRUE(bf16->plan->precision_reason().empty());
}

// Devices that hold the job only in bf16 leave auto no fp32 to choose.
TEST(AdmissionTest, AutoPrecisionThatFitsOnlyInBf16HasNoFp32Plan) {
  const std::string yaml = SpecYaml("{}");
  const v1::JobSpec spec = Parse(yaml);
  v1::JobSpec bf16 = spec, fp32 = spec;
  bf16.set_precision(v1::PRECISION_BF16);
  fp32.set_precision(v1::PRECISION_FP32);
  plan::PlanOptions options;
  options.device_memory_bytes = kGiB;
  options.search_reach = false;
  const int64_t bf16_bytes =
      RequiredDeviceMemoryBytes(plan::PlanJob(bf16, options).value().memory);
  const int64_t fp32_bytes =
      RequiredDeviceMemoryBytes(plan::PlanJob(fp32, options).value().memory);
  ASSERT_LT(bf16_bytes, fp32_bytes);
  absl::StatusOr<AdmittedJob> admitted =
      AdmitJob(spec, yaml, Devices(bf16_bytes));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->plan->precision(), "bf16");
  EXPECT_FALSE(admitted->fp32_alternative.has_value());
  // Nor is it admitted where it does not fit in bf16 either.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      AdmitJob(spec, yaml, Devices(bf16_bytes / 2)).status()));
}

TEST(AdmissionTest, AJobThatDoesNotFitIsRejectedNamingWhatBinds) {
  // A vocabulary projection of 64 x 2,000,000 logits per rank and a
  // 2,000,000-row embedding: far beyond 64 MiB devices.
  const std::string yaml =
      absl::StrReplaceAll(SpecYaml("{}"), {{"vocab: 320", "vocab: 2000000"}});
  absl::StatusOr<AdmittedJob> admitted =
      AdmitJob(Parse(yaml), yaml, Devices(64 * kMiB));
  ASSERT_FALSE(admitted.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(admitted.status()))
      << admitted.status();
  const std::string message(admitted.status().message());
  EXPECT_THAT(message, StartsWith("job does not fit its devices: "));
  // The explanation names the component holding most of the peak.
  bool names_a_component = false;
  for (const char* component :
       {"weights", "gradients", "optimizer", "dispatch", "vocab_projection",
        "checkpoint", "attention", "activations", "staging"}) {
    names_a_component |= message.find(component) != std::string::npos;
  }
  EXPECT_TRUE(names_a_component) << message;
  EXPECT_THAT(message, HasSubstr("64.00 MiB")) << message;
}

TEST(AdmissionTest, AJobWhoseCheckpointsOverflowTheHostIsRejected) {
  const std::string yaml = SpecYaml("{}");
  const v1::JobSpec spec = Parse(yaml);
  AdmissionDevices devices = Devices(kGiB);
  absl::StatusOr<AdmittedJob> roomy = AdmitJob(spec, yaml, devices);
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  const int64_t needed = roomy->plan->node_host_bytes();
  // Rank 0's host peak (its checkpoint staging) and rank 1's.
  EXPECT_GT(needed, roomy->plan->planned().host_peak_bytes());
  devices.host_memory_bytes = needed;
  EXPECT_TRUE(AdmitJob(spec, yaml, devices).ok());
  devices.host_memory_bytes = needed - 1;
  absl::StatusOr<AdmittedJob> tight = AdmitJob(spec, yaml, devices);
  ASSERT_FALSE(tight.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(tight.status()));
  const std::string message(tight.status().message());
  EXPECT_THAT(message,
              AllOf(StartsWith("job does not fit its nodes' host memory: "),
                    HasSubstr("checkpoint"), HasSubstr("2 devices")));
}

// An elastic job on 1 to 2 nodes: its node holds the most at 1 node (dp
// 1), and its host and devices must hold that end too.
TEST(AdmissionTest, AnElasticJobMustFitAtItsFewestNodes) {
  std::string yaml = SpecYaml("{}");
  const std::string fixed = "resources: {nodes: 1, devices_per_node: 2}";
  yaml.replace(yaml.find(fixed), fixed.size(),
               "resources: {nodes: 2, min_nodes: 1, devices_per_node: 2}");
  const std::string layout = "parallel: {ep: 2, pp: 1, dp: 1}";
  yaml.replace(yaml.find(layout), layout.size(), "parallel: {ep: 2, pp: 1}");
  const v1::JobSpec spec = Parse(yaml);
  AdmissionDevices devices = Devices(kGiB);
  absl::StatusOr<AdmittedJob> roomy = AdmitJob(spec, yaml, devices);
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  EXPECT_EQ(roomy->plan->min_nodes(), 1);
  const int64_t fewest_host = roomy->plan->min_nodes_node_host_bytes();
  EXPECT_GT(fewest_host, roomy->plan->node_host_bytes());
  EXPECT_GT(MinNodesRequiredDeviceMemoryBytes(*roomy->plan),
            RequiredDeviceMemoryBytes(*roomy->plan));
  devices.host_memory_bytes = fewest_host;
  EXPECT_TRUE(AdmitJob(spec, yaml, devices).ok());
  devices.host_memory_bytes = fewest_host - 1;
  absl::StatusOr<AdmittedJob> tight = AdmitJob(spec, yaml, devices);
  ASSERT_FALSE(tight.ok());
  EXPECT_THAT(std::string(tight.status().message()),
              HasSubstr(" at resources.min_nodes 1; the largest node"));
  // Devices that hold the 2-node end only.
  const int64_t between = (RequiredDeviceMemoryBytes(*roomy->plan) +
                           MinNodesRequiredDeviceMemoryBytes(*roomy->plan)) /
                          2;
  absl::StatusOr<AdmittedJob> small = AdmitJob(spec, yaml, Devices(between));
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(std::string(small.status().message()),
              StartsWith("job does not fit its devices: at "
                         "resources.min_nodes 1 (parallel.dp 1): "));
}

TEST(AdmissionTest, AutoWithoutNodesIsRejected) {
  const std::string yaml = SpecYaml("auto");
  absl::StatusOr<AdmittedJob> admitted =
      AdmitJob(Parse(yaml), yaml, AdmissionDevices());
  ASSERT_FALSE(admitted.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(admitted.status()));
  EXPECT_EQ(admitted.status().message(),
            "schedules: auto needs a node's device memory to plan for; attach "
            "a worker first or pin the schedules");
  // Nodes too small for the job's devices_per_node do not help.
  admitted = AdmitJob(Parse(yaml), yaml, Devices(0));
  ASSERT_FALSE(admitted.ok());
  EXPECT_THAT(admitted.status().message(),
              HasSubstr("no node with 2 devices reports it"));
}

TEST(AdmissionTest, PinnedSchedulesWithoutNodesAreAdmittedWithoutAPlan) {
  const std::string yaml = SpecYaml("{sco: true}");
  const v1::JobSpec spec = Parse(yaml);
  for (const AdmissionDevices& devices : {AdmissionDevices(), Devices(0)}) {
    absl::StatusOr<AdmittedJob> admitted = AdmitJob(spec, yaml, devices);
    ASSERT_TRUE(admitted.ok()) << admitted.status();
    EXPECT_FALSE(admitted->plan.has_value());
    EXPECT_EQ(admitted->spec.SerializeAsString(), spec.SerializeAsString());
    EXPECT_EQ(admitted->spec_yaml, yaml);
  }
}

TEST(AdmissionTest, NodeShapesParseAndBadOnesAreNamed) {
  absl::StatusOr<std::vector<NodeShape>> shapes =
      ParseNodeShapes("8x80GiB, 2x512MiB");
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 2);
  EXPECT_EQ((*shapes)[0].devices, 8);
  EXPECT_EQ((*shapes)[0].device_memory_bytes, 80 * kGiB);
  EXPECT_EQ((*shapes)[1].devices, 2);
  EXPECT_EQ((*shapes)[1].device_memory_bytes, 512 * kMiB);
  EXPECT_EQ(DescribeNodeShapes(*shapes), "8 x 80.00 GiB, 2 x 512.00 MiB");
  EXPECT_TRUE(ParseNodeShapes("")->empty());
  for (const char* bad :
       {"8", "x80GiB", "0x1GiB", "2x0", "2xlots", "2x1GiB,"}) {
    const absl::StatusOr<std::vector<NodeShape>> parsed = ParseNodeShapes(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr("DEVICESxMEMORY"));
  }
}

TEST(AdmissionTest, DeclaredShapesArePlannedForBeforeAnyNodeAttaches) {
  const std::string yaml = SpecYaml("{ring_dtp: true}");
  AdmissionDevices devices;  // no node attached
  devices.declared_shapes = {{1, 80 * kGiB}, {2, kGiB}};
  absl::StatusOr<AdmittedJob> admitted = AdmitJob(Parse(yaml), yaml, devices);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(admitted->plan.has_value());
  // Only the 2-device shape can hold the job's two devices per node.
  EXPECT_EQ(admitted->plan->device_memory_bytes(), kGiB);

  // An auto spec gets its schedules chosen for the declared shape.
  const std::string auto_yaml = SpecYaml("auto");
  admitted = AdmitJob(Parse(auto_yaml), auto_yaml, devices);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->plan->schedules_chosen());

  // Attached nodes larger than the shapes count too.
  devices.device_memory_bytes = 2 * kGiB;
  admitted = AdmitJob(Parse(yaml), yaml, devices);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->plan->device_memory_bytes(), 2 * kGiB);
}

TEST(AdmissionTest, AJobNoDeclaredShapeCanHoldIsRefused) {
  const std::string yaml = SpecYaml("{}");
  AdmissionDevices devices;
  devices.declared_shapes = {{1, 80 * kGiB}};
  const absl::StatusOr<AdmittedJob> admitted =
      AdmitJob(Parse(yaml), yaml, devices);
  ASSERT_TRUE(absl::IsFailedPrecondition(admitted.status()));
  EXPECT_EQ(admitted.status().message(),
            "resources.devices_per_node: 2 devices on one node, but no node "
            "of the cluster's declared shapes (1 x 80.00 GiB) has that many; "
            "use at most 1");

  // Too big for the shape that has enough devices: refused, naming what
  // binds.
  const std::string huge =
      absl::StrReplaceAll(SpecYaml("{}"), {{"vocab: 320", "vocab: 2000000"}});
  devices.declared_shapes = {{2, 64 * kMiB}};
  EXPECT_THAT(
      std::string(AdmitJob(Parse(huge), huge, devices).status().message()),
      StartsWith("job does not fit its devices: "));
}

TEST(AdmissionTest, AutoWithNodesSetsTheChosenSchedules) {
  const std::string yaml = SpecYaml("auto");
  const v1::JobSpec spec = Parse(yaml);
  ASSERT_TRUE(spec.schedules().auto_());
  absl::StatusOr<AdmittedJob> admitted = AdmitJob(spec, yaml, Devices(kGiB));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(admitted->plan.has_value());
  EXPECT_TRUE(admitted->plan->schedules_chosen());
  EXPECT_TRUE(admitted->plan->fits());
  const v1::ScheduleSpec& schedules = admitted->spec.schedules();
  EXPECT_TRUE(schedules.auto_());
  EXPECT_TRUE(schedules.has_dispatch_chunk_tokens());
  EXPECT_TRUE(schedules.has_ring_dtp());
  EXPECT_TRUE(schedules.has_sco());
  EXPECT_NE(schedules.optimizer_offload(), v1::OPTIMIZER_OFFLOAD_UNSPECIFIED);
  // The stored YAML is the planned spec's: it reads back as the spec.
  EXPECT_NE(admitted->spec_yaml, yaml);
  absl::StatusOr<v1::JobSpec> reread = ParseJobSpecYaml(admitted->spec_yaml);
  ASSERT_TRUE(reread.ok()) << reread.status() << "\n" << admitted->spec_yaml;
  EXPECT_EQ(reread->SerializeAsString(), admitted->spec.SerializeAsString())
      << admitted->spec_yaml;
}

TEST(AdmissionTest, ThePlanKeepsEachPredictionsWorstRank) {
  const std::string yaml = SpecYaml("{}");
  const v1::JobSpec spec = Parse(yaml);
  absl::StatusOr<AdmittedJob> admitted = AdmitJob(spec, yaml, Devices(kGiB));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  plan::PlanOptions options;
  options.device_memory_bytes = kGiB;
  options.search_reach = false;  // as admission plans
  absl::StatusOr<plan::JobPlan> full = plan::PlanJob(spec, options);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->memory.planned().ranks_size(), 2);  // ep 2
  const v1::MemoryPrediction* kept[] = {&admitted->plan->baseline(),
                                        &admitted->plan->planned()};
  const v1::MemoryPrediction* all[] = {&full->memory.baseline(),
                                       &full->memory.planned()};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(kept[i]->ranks_size(), 1);
    EXPECT_EQ(kept[i]->ranks(0).rank(), all[i]->worst_rank());
    EXPECT_EQ(kept[i]->device_peak_bytes(), all[i]->device_peak_bytes());
    EXPECT_EQ(kept[i]->binding_component(), all[i]->binding_component());
  }
  EXPECT_EQ(admitted->plan->explanation(), full->memory.explanation());
}

TEST(AdmissionTest, RequiredMemoryKeepsThePlansMargin) {
  v1::MemoryPlan plan;
  EXPECT_EQ(RequiredDeviceMemoryBytes(plan), 0);
  plan.mutable_planned()->set_device_peak_bytes(950 * kMiB);
  plan.set_margin(0.05);
  // The smallest device the planner calls a fit, to the byte.
  const int64_t required = RequiredDeviceMemoryBytes(plan);
  EXPECT_NEAR(static_cast<double>(required), 1000.0 * kMiB, 2.0);
  EXPECT_GE(static_cast<int64_t>(required * 0.95), 950 * kMiB);
  EXPECT_LT(static_cast<int64_t>((required - 1) * 0.95), 950 * kMiB);
  plan.set_margin(0);
  EXPECT_EQ(RequiredDeviceMemoryBytes(plan), 950 * kMiB);
}

TEST(AdmissionTest, ThePlannersErrorsAreReturnedWithContext) {
  const std::string yaml = SpecYaml("{}");
  absl::StatusOr<AdmittedJob> admitted = AdmitJob(
      Parse(yaml), yaml, Devices(kGiB),
      [](const v1::JobSpec&,
         const plan::PlanOptions& options) -> absl::StatusOr<plan::JobPlan> {
        EXPECT_EQ(options.device_memory_bytes, kGiB);
        return absl::InvalidArgumentError("no layout");
      });
  EXPECT_TRUE(absl::IsInvalidArgument(admitted.status()));
  EXPECT_EQ(admitted.status().message(),
            "planning the job's memory: no layout");
}

TEST(AdmissionTest, TheCacheReturnsTheSamePlanForTheSameSpec) {
  const v1::JobSpec spec = Parse(SpecYaml("auto"));
  plan::PlanOptions options;
  options.device_memory_bytes = kGiB;
  PlanCache cache(/*capacity=*/1);
  absl::StatusOr<plan::JobPlan> direct = plan::PlanJob(spec, options);
  ASSERT_TRUE(direct.ok()) << direct.status();
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<plan::JobPlan> cached = cache.Plan(spec, options);
    ASSERT_TRUE(cached.ok()) << cached.status();
    EXPECT_EQ(cached->memory.planned().device_peak_bytes(),
              direct->memory.planned().device_peak_bytes());
    EXPECT_EQ(cached->memory.planned().ranks_size(), 1);
    EXPECT_EQ(cached->spec.SerializeAsString(),
              direct->spec.SerializeAsString());
  }
  // Other options, and (past the capacity) the first again: planned anew.
  options.device_memory_bytes = 2 * kGiB;
  EXPECT_EQ(cache.Plan(spec, options)->memory.device_memory_bytes(), 2 * kGiB);
  options.device_memory_bytes = kGiB;
  EXPECT_EQ(cache.Plan(spec, options)->memory.device_memory_bytes(), kGiB);
  // Errors are not kept.
  options.device_memory_bytes = 0;
  EXPECT_FALSE(cache.Plan(spec, options).ok());
}

}  // namespace
}  // namespace plateau::daemon
