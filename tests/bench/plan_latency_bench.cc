// How long the memory planner takes: plateaud plans every submitted job
// before it answers, so a slow plan is a slow submit. For each spec, the
// median over rounds of one prediction (PredictMemory: a replay of each
// distinct rank) and of a whole plan (PlanJob: baseline, the schedules'
// candidates under `schedules: auto`, and the reach bisections).
//
// Usage: plan_latency_bench [--rounds N] [--spec FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/byte_size.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "proto/job_spec.h"

ABSL_FLAG(int, rounds, 5, "timed rounds per measurement (the median is kept)");
ABSL_FLAG(std::string, spec, "deploy/examples/tiny-moe.yaml",
          "the small spec to plan (the large one is built in)");

namespace plateau {
namespace {

// A DeepSeek-V3-like shape (docs/SCALE.md) on 256 devices, schedules
// chosen by the planner.
constexpr char kLargeSpec[] = R"(name: large-moe
resources: {nodes: 32, devices_per_node: 8}
model: {layers: 58, d_model: 7168, heads: 128, experts: 256, top_k: 8,
        ffn_hidden: 2048, vocab: 129280, seq_len: 32768}
parallel: {ep: 128, pp: 2, dp: 1}
schedules: auto
data: {path: data/none, batch_tokens: 4194304}
train: {steps: 1000}
)";

template <typename Work>
double MedianSeconds(int rounds, Work work) {
  std::vector<double> seconds;
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

void Measure(const std::string& name, const v1::JobSpec& spec,
             int64_t device_memory_bytes, int rounds) {
  plan::PlanOptions options;
  options.device_memory_bytes = device_memory_bytes;
  absl::StatusOr<plan::JobPlan> plan = plan::PlanJob(spec, options);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(),
                 std::string(plan.status().message()).c_str());
    return;
  }
  const double predict = MedianSeconds(
      rounds, [&] { (void)plan::PredictMemory(plan->spec, plan::Routing()); });
  const double whole =
      MedianSeconds(rounds, [&] { (void)plan::PlanJob(spec, options); });
  std::printf("| %s | %d | %s | %.1f ms | %.1f ms | %.0fx | %s |\n",
              name.c_str(), plan->memory.planned().ranks_size(),
              FormatBytes(device_memory_bytes).c_str(), 1e3 * predict,
              1e3 * whole, whole / predict,
              plan->memory.planned().schedules().c_str());
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  std::printf(
      "| spec | ranks replayed | device memory | one prediction | whole plan "
      "| ratio | schedules chosen |\n| --- | --- | --- | --- | --- | --- | --- "
      "|\n");
  absl::StatusOr<plateau::v1::JobSpec> small =
      plateau::ReadJobSpecFile(absl::GetFlag(FLAGS_spec));
  if (!small.ok()) {
    std::fprintf(stderr, "%s\n", std::string(small.status().message()).c_str());
    return 1;
  }
  plateau::Measure(small->name(), *small, int64_t{2} << 30, rounds);
  absl::StatusOr<plateau::v1::JobSpec> large =
      plateau::ParseJobSpecYaml(plateau::kLargeSpec);
  if (!large.ok()) {
    std::fprintf(stderr, "%s\n", std::string(large.status().message()).c_str());
    return 1;
  }
  plateau::Measure("large-moe (668B, 256 devices, auto)", *large,
                   int64_t{141} * 1000 * 1000 * 1000, rounds);
  return 0;
}
