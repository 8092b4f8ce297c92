// The benchmarks of tests/gpu/run.sh at smoke sizes: on the CPU emulation
// (and on a GPU) every one runs to the end and measures something.
#include "tests/gpu/cuda_benchmarks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"

namespace plateau::gpu {
namespace {

TEST(CudaBenchmarksTest, EveryBenchmarkRunsAtSmokeSizes) {
  const absl::Status device = kernels::cuda::RequireCudaDevice();
  if (!device.ok()) GTEST_SKIP() << device;
  BenchmarkOptions options;
  options.smoke = true;
  options.repeats = 1;
  options.training_steps = 1;
  const absl::StatusOr<std::vector<BenchmarkResult>> results =
      RunCudaBenchmarks(options);
  ASSERT_TRUE(results.ok()) << results.status();
  std::vector<std::string> names;
  for (const BenchmarkResult& result : *results) {
    names.push_back(result.name);
    EXPECT_GT(result.value, 0.0) << result.name;
    EXPECT_GT(result.baseline_value, 0.0) << result.name;
  }
  EXPECT_THAT(names, testing::ElementsAre("grouped_gemm", "grouped_gemm_bf16",
                                          "vocab_projection", "adamw",
                                          "training", "training_bf16"));
  const std::string table = FormatResults(*results);
  EXPECT_THAT(table, testing::HasSubstr(
                         "logits 12.00 KiB blockwise vs 28.12 KiB unfused"));
  EXPECT_THAT(table, testing::HasSubstr("tf32's)"));
  EXPECT_THAT(table, testing::HasSubstr("device peak"));
}

}  // namespace
}  // namespace plateau::gpu
