// The CUDA backend's benchmarks on the first GPU (cuda_benchmarks.h): a
// table on stdout, and JSON with --json.
//
// Usage: cuda_bench [--json FILE] [--repeats N] [--training_steps N]
#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "nlohmann/json.hpp"
#include "tests/gpu/cuda_benchmarks.h"

ABSL_FLAG(std::string, json, "", "also write the results here");
ABSL_FLAG(int32_t, repeats, 10, "timed repeats of each kernel benchmark");
ABSL_FLAG(int32_t, training_steps, 3, "timed training steps");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  plateau::gpu::BenchmarkOptions options;
  options.repeats = absl::GetFlag(FLAGS_repeats);
  options.training_steps = absl::GetFlag(FLAGS_training_steps);
  const absl::StatusOr<std::vector<plateau::gpu::BenchmarkResult>> results =
      plateau::gpu::RunCudaBenchmarks(options);
  if (!results.ok()) {
    std::fprintf(stderr, "cuda_bench: %s\n",
                 results.status().ToString().c_str());
    return 1;
  }
  std::printf("%s", plateau::gpu::FormatResults(*results).c_str());
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    nlohmann::json json = nlohmann::json::array();
    for (const plateau::gpu::BenchmarkResult& r : *results) {
      json.push_back({{"name", r.name},
                      {"unit", r.unit},
                      {"value", r.value},
                      {"baseline", r.baseline},
                      {"baseline_value", r.baseline_value},
                      {"ratio", r.ratio()},
                      {"detail", r.detail}});
    }
    std::ofstream(path) << json.dump(2) << "\n";
  }
  return 0;
}
