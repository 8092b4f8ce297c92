#include "plan/precision_choice.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job_spec.h"

namespace plateau::plan {
namespace {

using ::testing::HasSubstr;

PrecisionDevice Cpu(const char* node, double speedup) {
  PrecisionDevice device{node, {}};
  device.device.set_kind(v1::DEVICE_KIND_CPU);
  device.device.set_bf16_product_speedup(speedup);
  return device;
}

PrecisionDevice Gpu(const char* node) {
  PrecisionDevice device{node, {}};
  device.device.set_kind(v1::DEVICE_KIND_CUDA);
  return device;
}

TEST(PrecisionChoiceTest, UnsetAndAutoAreAuto) {
  v1::JobSpec spec;
  EXPECT_TRUE(IsAutoPrecision(spec));
  spec.set_precision(v1::PRECISION_AUTO);
  EXPECT_TRUE(IsAutoPrecision(spec));
  spec.set_precision(v1::PRECISION_FP32);
  EXPECT_FALSE(IsAutoPrecision(spec));
}

TEST(PrecisionChoiceTest, ASetPrecisionIsKept) {
  v1::JobSpec spec;
  spec.set_precision(v1::PRECISION_BF16);
  const std::vector<PrecisionDevice> slow = {Cpu("node-a", 0.8)};
  const PrecisionChoice choice = ChoosePrecision(spec, slow, true);
  EXPECT_EQ(choice.precision, v1::PRECISION_BF16);
  EXPECT_EQ(choice.reason, "set in the spec");
}

TEST(PrecisionChoiceTest, Bf16WhereEveryDevicesProductsAreFaster) {
  const std::vector<PrecisionDevice> fast = {Cpu("node-a", 3.4),
                                             Cpu("node-b", 2.9), Gpu("gpu")};
  const PrecisionChoice choice = ChoosePrecision(v1::JobSpec(), fast, true);
  EXPECT_EQ(choice.precision, v1::PRECISION_BF16);
  EXPECT_EQ(choice.reason, "auto: bf16 products 2.90x fp32's on node-b");
}

TEST(PrecisionChoiceTest, TheSlowestDeviceDecides) {
  const std::vector<PrecisionDevice> mixed = {Cpu("node-a", 3.4),
                                              Cpu("node-b", 0.93)};
  const PrecisionChoice choice = ChoosePrecision(v1::JobSpec(), mixed, true);
  EXPECT_EQ(choice.precision, v1::PRECISION_FP32);
  EXPECT_THAT(choice.reason, HasSubstr("bf16 products 0.93x fp32's on node-b"));
  EXPECT_THAT(choice.reason, HasSubstr("it fits in fp32"));
}

TEST(PrecisionChoiceTest, Bf16WhereOnlyBf16Fits) {
  const std::vector<PrecisionDevice> slow = {Cpu("node-a", 0.93)};
  const PrecisionChoice choice = ChoosePrecision(v1::JobSpec(), slow, false);
  EXPECT_EQ(choice.precision, v1::PRECISION_BF16);
  EXPECT_THAT(choice.reason, HasSubstr("fits its devices only in bf16"));
}

TEST(PrecisionChoiceTest, BarelyFasterIsNotEnough) {
  const std::vector<PrecisionDevice> barely = {
      Cpu("node-a", kBf16SpeedupToChooseIt - 0.01)};
  EXPECT_EQ(ChoosePrecision(v1::JobSpec(), barely, true).precision,
            v1::PRECISION_FP32);
  const std::vector<PrecisionDevice> enough = {
      Cpu("node-a", kBf16SpeedupToChooseIt)};
  EXPECT_EQ(ChoosePrecision(v1::JobSpec(), enough, true).precision,
            v1::PRECISION_BF16);
}

TEST(PrecisionChoiceTest, AnUnmeasuredCpuIsNotFaster) {
  const std::vector<PrecisionDevice> unmeasured = {Cpu("node-a", 0)};
  const PrecisionChoice choice =
      ChoosePrecision(v1::JobSpec(), unmeasured, true);
  EXPECT_EQ(choice.precision, v1::PRECISION_FP32);
  EXPECT_THAT(choice.reason, HasSubstr("node-a did not measure"));
}

TEST(PrecisionChoiceTest, GpusRunBf16) {
  const std::vector<PrecisionDevice> gpus = {Gpu("gpu-a"), Gpu("gpu-b")};
  const PrecisionChoice choice = ChoosePrecision(v1::JobSpec(), gpus, true);
  EXPECT_EQ(choice.precision, v1::PRECISION_BF16);
  EXPECT_THAT(choice.reason, HasSubstr("tensor cores"));
}

TEST(PrecisionChoiceTest, Bf16GradientsNeedBf16) {
  v1::JobSpec spec;
  spec.set_gradient_accumulation(v1::GRADIENT_ACCUMULATION_BF16);
  const std::vector<PrecisionDevice> slow = {Cpu("node-a", 0.9)};
  const PrecisionChoice choice = ChoosePrecision(spec, slow, true);
  EXPECT_EQ(choice.precision, v1::PRECISION_BF16);
  EXPECT_THAT(choice.reason, HasSubstr("gradient_accumulation: bf16"));
}

// A small MoE on one node of two devices, its precision left to auto.
v1::JobSpec SmallSpec() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      "name: small\n"
      "resources: {nodes: 1, devices_per_node: 2}\n"
      "model: {layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,\n"
      "        ffn_hidden: 128, vocab: 320, seq_len: 64}\n"
      "parallel: {ep: 2, pp: 1, dp: 1}\n"
      "optimizer: {kind: adamw}\n"
      "data: {path: data/x, batch_tokens: 1024}\n"
      "train: {steps: 10}\n");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::JobSpec());
}

v1::Node NodeOf(const char* name, int devices, double speedup) {
  v1::Node node;
  node.set_name(name);
  for (int i = 0; i < devices; ++i) {
    *node.add_devices() = Cpu(name, speedup).device;
  }
  return node;
}

TEST(PlanForNodesTest, AutoIsPlannedInThePrecisionTheNodesWouldGetIt) {
  PlanOptions options;
  options.device_memory_bytes = int64_t{1} << 30;
  options.search_reach = false;
  // The one-device node cannot hold the job: its speed does not count.
  const std::vector<v1::Node> slow = {NodeOf("one", 1, 3.4),
                                      NodeOf("slow", 2, 0.9)};
  absl::StatusOr<JobPlan> planned = PlanForNodes(SmallSpec(), options, slow);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->memory.precision(), "fp32");
  EXPECT_THAT(planned->memory.precision_reason(),
              HasSubstr("bf16 products 0.90x fp32's on slow"));
  EXPECT_THAT(planned->memory.precision_reason(),
              HasSubstr("chosen again at a job's first attempt"));

  const std::vector<v1::Node> fast = {NodeOf("fast", 2, 3.4)};
  planned = PlanForNodes(SmallSpec(), options, fast);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->memory.precision(), "bf16");

  planned = PlanForNodes(SmallSpec(), options, {});
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->memory.precision(), "bf16");
  EXPECT_THAT(planned->memory.precision_reason(),
              HasSubstr("no node to choose for"));

  // A spec's own precision is planned as it is, and says nothing more.
  v1::JobSpec set = SmallSpec();
  set.set_precision(v1::PRECISION_BF16);
  planned = PlanForNodes(set, options, slow);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->memory.precision(), "bf16");
  EXPECT_TRUE(planned->memory.precision_reason().empty());
}

}  // namespace
}  // namespace plateau::plan
