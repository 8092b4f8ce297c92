// What the memory schedules cost in training throughput, at a size where the
// unscheduled step fits: the example model (deploy/examples/tiny-moe.yaml's
// shape and schedules: d_model 256, 4 layers, 8 experts top-2, vocab 4096,
// 2,048 tokens a step; dispatch chunks of 1024 copies) trained with no
// schedule, each schedule alone, and all four, every variant in its own
// backend of this process. The variants take turns step by step, so that
// the machine's drift hits them alike; each reports its median step time
// and its cost against the unscheduled step. As in a job, bf16 products
// with the optimizer offloaded store the weights in bf16 on the device
// (ModelConfig::bf16_weight_storage).
//
// Usage: schedules_cost_bench [--steps N] [--threads N] [--precision
// bf16|fp32] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/zero_shards.h"
#include "engine/train/model_io.h"
#include "engine/train/rank_context.h"
#include "engine/train/training_step.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"
#include "tests/bench/bench_util.h"

ABSL_FLAG(int, steps, 12, "timed steps per variant (after 2 warm-up steps)");
ABSL_FLAG(int, threads, 2, "kernel threads");
ABSL_FLAG(std::string, precision, "fp32", "bf16 or fp32 matrix products");

namespace plateau {
namespace {

constexpr int64_t kSequences = 8;

struct Variant {
  std::string name;
  bench::Schedules schedules;
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::ZeroShards> shards;
  std::unique_ptr<engine::AdamWOptimizer> optimizer;
  std::unique_ptr<engine::TrainingStep> step;
  std::vector<double> seconds;
};

void Build(Variant& variant) {
  engine::ModelConfig config = bench::ExampleModelConfig();
  config.matmul_precision =
      bench::PrecisionOrExit(absl::GetFlag(FLAGS_precision));
  bench::ApplySchedules(variant.schedules, config);
  const int threads = absl::GetFlag(FLAGS_threads);
  variant.backend = engine::Backend::CreateCpu(
      threads, engine::AccountedAllocator::kUnlimited);
  engine::AccountedAllocator& allocator = variant.backend->allocator();
  variant.model = bench::OrExit(
      engine::Model::Create(config, &variant.backend->ops(), &allocator));
  bench::ExitIfError(variant.model->InitializeWeights(1));
  variant.shards = std::make_unique<engine::ZeroShards>(variant.model->layout(),
                                                        nullptr, nullptr);
  variant.optimizer = bench::OrExit(engine::AdamWOptimizer::Create(
      bench::AdamWSettingsFor(variant.schedules, threads),
      &variant.model->layout(), variant.shards->owned(),
      variant.model->weight_buffers(), variant.model->gradient_buffers(),
      &variant.backend->ops(), &allocator));
  engine::InitializeMasters(1, variant.model->layout(),
                            variant.optimizer->MasterPieces());
  variant.step = std::make_unique<engine::TrainingStep>(
      engine::RankContext(), variant.model.get(), variant.shards.get(),
      variant.optimizer.get(), /*micro_batches=*/1, &allocator);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int Main() {
  std::vector<Variant> variants(6);
  variants[0].name = "none";
  variants[1].name = "PipelinedLLEP";
  variants[1].schedules.llep = true;
  variants[2].name = "Ring-DTP";
  variants[2].schedules.ring_dtp = true;
  variants[3].name = "SCO";
  variants[3].schedules.sco = true;
  variants[4].name = "OffloadStreamAdamW";
  variants[4].schedules.offload = true;
  variants[5].name = "all four";
  bench::Schedules& all_four = variants[5].schedules;
  all_four.llep = all_four.ring_dtp = all_four.sco = all_four.offload = true;
  for (Variant& variant : variants) Build(variant);

  std::mt19937 rng(1);
  std::vector<int32_t> tokens(kSequences * 257);
  const int steps = absl::GetFlag(FLAGS_steps);
  for (int index = 1; index <= steps + 2; ++index) {
    for (int32_t& token : tokens) token = static_cast<int32_t>(rng() % 4096);
    for (Variant& variant : variants) {
      const auto start = std::chrono::steady_clock::now();
      bench::OrExit(
          variant.step->Run(tokens.data(), kSequences, 1e-3f, index, 1.0));
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      if (index > 2) variant.seconds.push_back(seconds);
    }
  }
  const double baseline = Median(variants[0].seconds);
  std::printf(
      "the example model, %lld tokens a step, %d threads, precision %s; "
      "median of %d steps, variants in turn\n%-20s | %-10s | %-12s | %s\n",
      static_cast<long long>(kSequences * 256), absl::GetFlag(FLAGS_threads),
      absl::GetFlag(FLAGS_precision).c_str(), steps, "schedules", "step",
      "tokens/s", "cost");
  nlohmann::json rows = nlohmann::json::array();
  for (const Variant& variant : variants) {
    const double seconds = Median(variant.seconds);
    std::printf("%-20s | %.3f s    | %-12.0f | %+.1f%%\n", variant.name.c_str(),
                seconds, kSequences * 256 / seconds,
                100.0 * (seconds / baseline - 1.0));
    rows.push_back({{"schedules", variant.name},
                    {"step_seconds", seconds},
                    {"tokens_per_second", kSequences * 256 / seconds},
                    {"cost", seconds / baseline - 1.0}});
  }
  bench::WriteJsonResults(rows);
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Main);
}
