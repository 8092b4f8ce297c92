#include "worker/agent/devices.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::worker {
namespace {

using testing::HasSubstr;

TEST(DevicesTest, CpuDevicesHaveTheGivenMemory) {
  auto devices = DevicesOf("cpu:3", 1 << 20);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*devices)[i].index(), i);
    EXPECT_EQ((*devices)[i].kind(), v1::DEVICE_KIND_CPU);
    EXPECT_EQ((*devices)[i].memory_bytes(), 1 << 20);
  }
  EXPECT_EQ(DevicesOf("auto", 1 << 20)->size(), 1u);
}

TEST(DevicesTest, BadFormsAreRefusedNamingTheFlag) {
  for (const char* flag : {"cpu", "cpu:0", "cpu:x", "gpu:2", "cpu:2000"}) {
    auto devices = DevicesOf(flag, 1 << 20);
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument)
        << flag;
    EXPECT_THAT(devices.status().message(), HasSubstr("--devices"));
  }
  EXPECT_EQ(DevicesOf("cuda", 1 << 20).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(DevicesOf("cpu:1", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::worker
