// How long the memory planner takes: plateaud plans every submitted job
// before it answers, so a slow plan is a slow submit. For each spec, the
// median over rounds of one prediction (PredictMemory: a replay of each
// distinct rank) and of a whole plan (PlanJob: baseline, the schedules'
// candidates under `schedules: auto`, the reach bisections, and for a job
// that does not fit the plans of its precision levers). Then one
// prediction's replay of the representative micro-batches, chunks and
// stages (rank_replay.h) against the replay of all of them, and the largest
// layout the spec's rules accept.
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
#include "plan/memory_ledger.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "plan/rank_replay.h"
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

// A pipeline of 16 stages, 64 micro-batches, 256 dispatch chunks a layer:
// small enough to replay in full.
constexpr char kDeepSpec[] = R"(name: deep-pipeline
resources: {nodes: 1, devices_per_node: 64}
model: {layers: 64, d_model: 256, heads: 8, experts: 64, top_k: 8,
        ffn_hidden: 512, vocab: 4096, seq_len: 64}
parallel: {ep: 4, pp: 16, dp: 1}
schedules: {dispatch_chunk_tokens: 64, ring_dtp: true, sco: true,
            optimizer_offload: stream}
data: {path: data/none, batch_tokens: 524288}
train: {steps: 1000, eval_every: 100, micro_batches: 64}
)";

// The largest layout the rules accept: 4096 ranks in 1024 stages, 1024
// layers, 4096 micro-batches, 4096 dispatch chunks a layer.
constexpr char kLargestSpec[] = R"(name: largest-valid
resources: {nodes: 64, devices_per_node: 64}
model: {layers: 1024, d_model: 256, heads: 8, experts: 4096, top_k: 64,
        ffn_hidden: 512, vocab: 4096, seq_len: 64}
parallel: {ep: 4, pp: 1024, dp: 1}
schedules: {dispatch_chunk_tokens: 1, ring_dtp: true, sco: true,
            optimizer_offload: stream}
data: {path: data/none, batch_tokens: 1048576}
train: {steps: 1000, eval_every: 100, micro_batches: 4096}
)";

// The same size with the schedules left to the planner, over the most
// distinct ranks (8 expert ranks, 2 replicas).
constexpr char kLargestAutoSpec[] = R"(name: largest-valid-auto
resources: {nodes: 64, devices_per_node: 64}
model: {layers: 1024, d_model: 256, heads: 8, experts: 4096, top_k: 64,
        ffn_hidden: 512, vocab: 4096, seq_len: 64}
parallel: {ep: 8, pp: 256, dp: 2}
schedules: auto
data: {path: data/none, batch_tokens: 4194304}
train: {steps: 1000, eval_every: 100, micro_batches: 4096}
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
  const double predict = MedianSeconds(rounds, [&] {
    (void)plan::PredictMemory(plan->spec, plan::Routing::WorstCase());
  });
  const double whole =
      MedianSeconds(rounds, [&] { (void)plan::PlanJob(spec, options); });
  std::printf("| %s | %d | %s | %.1f ms | %.1f ms | %.0fx | %s |\n",
              name.c_str(), plan->memory.planned().ranks_size(),
              FormatBytes(device_memory_bytes).c_str(), 1e3 * predict,
              1e3 * whole, whole / predict,
              plan->memory.planned().schedules().c_str());
}

// One prediction's replays, every distinct rank: of all micro-batches,
// chunks and stages, and of the representative ones.
void MeasureReplay(const std::string& name, const v1::JobSpec& spec,
                   int rounds) {
  absl::StatusOr<plan::ReplayJob> job =
      plan::ReplayJobOf(spec, plan::Routing::WorstCase());
  if (!job.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(),
                 std::string(job.status().message()).c_str());
    return;
  }
  auto replay = [](const plan::ReplayJob& replayed) {
    for (const plan::RankIndex& rank : plan::DistinctRanks(replayed)) {
      plan::MemoryLedger ledger;
      plan::ReplayRank(replayed, rank, &ledger);
    }
  };
  plan::ReplayJob every = *job;
  every.every_repetition = true;
  const double representative = MedianSeconds(rounds, [&] { replay(*job); });
  const double all = MedianSeconds(rounds, [&] { replay(every); });
  std::printf("| %s | %zu of %zu | %.1f ms | %.1f ms | %.0fx |\n", name.c_str(),
              plan::DistinctRanks(*job).size(),
              plan::DistinctRanks(every).size(), 1e3 * all,
              1e3 * representative, all / representative);
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
  // On devices it does not fit: the plan also tries the precision levers
  // the spec leaves unused (planner.h), as a refused submission's does.
  plateau::Measure("large-moe on 40 GB devices (does not fit)", *large,
                   int64_t{40} * 1000 * 1000 * 1000, rounds);
  absl::StatusOr<plateau::v1::JobSpec> deep =
      plateau::ParseJobSpecYaml(plateau::kDeepSpec);
  absl::StatusOr<plateau::v1::JobSpec> largest =
      plateau::ParseJobSpecYaml(plateau::kLargestSpec);
  absl::StatusOr<plateau::v1::JobSpec> largest_auto =
      plateau::ParseJobSpecYaml(plateau::kLargestAutoSpec);
  if (!deep.ok() || !largest.ok() || !largest_auto.ok()) {
    std::fprintf(stderr, "%s %s %s\n", deep.status().ToString().c_str(),
                 largest.status().ToString().c_str(),
                 largest_auto.status().ToString().c_str());
    return 1;
  }
  plateau::Measure("largest valid layout (4096 ranks, pp 1024)", *largest,
                   int64_t{141} * 1000 * 1000 * 1000, rounds);
  plateau::Measure("largest valid layout, 8 x 256 x 2, auto", *largest_auto,
                   int64_t{141} * 1000 * 1000 * 1000, rounds);
  std::printf(
      "\n| spec | ranks replayed | every micro-batch, chunk, stage | "
      "representative | ratio |\n| --- | --- | --- | --- | --- |\n");
  plateau::MeasureReplay(
      "deep pipeline (pp 16, 64 micro-batches, 256 "
      "chunks)",
      *deep, rounds);
  return 0;
}
