// Tests of plan_options.h.
#include "client/plan_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::client {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(PlanOptionsTest,
     DefaultsLeaveTheDeviceMemoryToPlateaudAndPlanTheWorstRouting) {
  absl::StatusOr<plan::PlanOptions> options = ParsePlanFlags({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->device_memory_bytes, 0);
  EXPECT_EQ(options->devices, 0);
  EXPECT_EQ(options->routing_skew, std::nullopt);
  EXPECT_EQ(options->margin, 0.05);
}

TEST(PlanOptionsTest, EveryFlagIsTaken) {
  absl::StatusOr<plan::PlanOptions> options =
      ParsePlanFlags({"2GiB", 8, 2.5, 0.1});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->device_memory_bytes, 2 * kGiB);
  EXPECT_EQ(options->devices, 8);
  EXPECT_EQ(options->routing_skew, std::optional<double>(2.5));
  EXPECT_EQ(options->margin, 0.1);
  options = ParsePlanFlags({"80GB", 0, 1.0, 0.0});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->device_memory_bytes, 80'000'000'000);
}

TEST(PlanOptionsTest, BadValuesNameTheirFlag) {
  struct Case {
    PlanFlags flags;
    const char* message;
  };
  const Case cases[] = {
      {{"lots", 0, 1.0, 0.05}, "--device_memory: 'lots' is not a byte size"},
      {{"0", 0, 1.0, 0.05}, "--device_memory must be more than 0"},
      {{"", -1, 1.0, 0.05}, "--devices must be 0"},
      {{"", 0, 0.5, 0.05}, "--routing_skew must be at least 1"},
      {{"", 0, 1.0, 1.0}, "--margin must be a share of the device in [0, 1)"},
      {{"", 0, 1.0, -0.1}, "--margin must be"},
  };
  for (const Case& test : cases) {
    absl::StatusOr<plan::PlanOptions> options = ParsePlanFlags(test.flags);
    ASSERT_FALSE(options.ok()) << test.message;
    EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
    EXPECT_THAT(options.status().message(), HasSubstr(test.message));
  }
}

v1::Node MakeNode(const std::string& name,
                  std::initializer_list<int64_t> device_bytes) {
  v1::Node node;
  node.set_name(name);
  int index = 0;
  for (const int64_t bytes : device_bytes) {
    v1::Device* device = node.add_devices();
    device->set_index(index++);
    device->set_memory_bytes(bytes);
  }
  return node;
}

TEST(PlanOptionsTest, LargestDeviceMemoryIsOverNodes) {
  google::protobuf::RepeatedPtrField<v1::Node> nodes;
  EXPECT_EQ(LargestDeviceMemoryBytes(nodes), 0);
  *nodes.Add() = MakeNode("small", {kGiB, kGiB});
  *nodes.Add() = MakeNode("big", {8 * kGiB});
  *nodes.Add() = MakeNode("unknown", {0});
  std::string name;
  EXPECT_EQ(LargestDeviceMemoryBytes(nodes, &name), 8 * kGiB);
  EXPECT_EQ(name, "big");
}

}  // namespace
}  // namespace plateau::client
