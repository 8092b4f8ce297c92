// The tiered optimizers against fused AdamW on the example model (4 layers,
// d_model 256, 8 experts, vocab 4096; 15.5M parameters): step time per
// parameter (all on the device, the variants alternated over rounds, each a
// ratio to AdamW's step of the same round) and state bytes by tier. Then the
// state of a 6.9B-parameter MoE shaped like OLMoE-1B-7B (16 layers, d_model
// 2048, 64 experts of 1024, top 8, vocab 50304), from the shapes alone.
//
// Usage: optimizer_step_bench [--rounds N] [--threads N] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/byte_size.h"
#include "engine/backend.h"
#include "engine/model/parameter_layout.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/tiered_optimizer.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"
#include "tests/bench/bench_util.h"

ABSL_FLAG(int, rounds, 5, "timed steps per variant");
ABSL_FLAG(int, threads, 2, "threads of the update");

namespace plateau {
namespace {

using engine::MomentumStorage;
using engine::TieredKind;
using engine::TieredSettings;

struct Variant {
  const char* name = "";
  bool adamw = false;
  TieredSettings settings;
  std::unique_ptr<engine::Optimizer> optimizer;
  std::vector<double> ratios;  // step time / AdamW's, per round
  double seconds = 0.0;        // the last round's
};

std::vector<Variant> Variants() {
  std::vector<Variant> variants(6);
  variants[0].name = "adamw";
  variants[0].adamw = true;
  const struct {
    const char* name;
    TieredKind kind;
    MomentumStorage expert_momentum;
  } tiered[] = {{"skewadam (expert momentum none)", TieredKind::kSkewAdam,
                 MomentumStorage::kNone},
                {"skewadam (expert momentum bf16)", TieredKind::kSkewAdam,
                 MomentumStorage::kBfloat16},
                {"skewadam (expert momentum fp32)", TieredKind::kSkewAdam,
                 MomentumStorage::kFloat32},
                {"adafactor", TieredKind::kAdafactor, MomentumStorage::kNone},
                {"lion", TieredKind::kLion, MomentumStorage::kNone}};
  for (int i = 0; i < 5; ++i) {
    variants[i + 1].name = tiered[i].name;
    variants[i + 1].settings.kind = tiered[i].kind;
    variants[i + 1].settings.expert_momentum = tiered[i].expert_momentum;
  }
  return variants;
}

int64_t Total(const std::map<std::string, int64_t>& bytes) {
  int64_t total = 0;
  for (const auto& [tier, value] : bytes) total += value;
  return total;
}

std::string Tiers(const std::map<std::string, int64_t>& bytes) {
  std::string text;
  for (const auto& [tier, value] : bytes) {
    text += (text.empty() ? "" : ", ") + tier + " " + FormatBytes(value);
  }
  return text;
}

engine::ModelConfig SeedShapedConfig() {
  engine::ModelConfig config;
  config.layers = 16;
  config.d_model = 2048;
  config.heads = 16;
  config.kv_heads = 16;
  config.experts = 64;
  config.top_k = 8;
  config.ffn_hidden = 1024;
  config.vocab = 50304;
  config.seq_len = 4096;
  return config;
}

int Run() {
  const engine::ModelConfig config = bench::ExampleModelConfig();
  std::unique_ptr<engine::Backend> backend = engine::Backend::CreateCpu(
      absl::GetFlag(FLAGS_threads), engine::AccountedAllocator::kUnlimited);
  const engine::ParameterLayout layout(config);
  const int64_t parameters = layout.total_elements();
  auto make = [&](engine::MemoryComponent component, int seed) {
    engine::Tensor tensor = bench::OrExit(engine::Tensor::Create(
        backend->allocator(), engine::MemoryPool::kDevice, component,
        {parameters}));
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (int64_t i = 0; i < parameters; ++i) tensor.f32()[i] = normal(rng);
    return tensor;
  };
  engine::Tensor gradients = make(engine::MemoryComponent::kGradients, 2);
  std::vector<Variant> variants = Variants();
  // The optimizers keep pointers to their weights: no reallocation.
  std::vector<engine::Tensor> weights;
  weights.reserve(variants.size());
  for (Variant& variant : variants) {
    weights.push_back(make(engine::MemoryComponent::kWeights, 1));
    if (variant.adamw) {
      variant.optimizer = bench::OrExit(engine::AdamWOptimizer::Create(
          engine::AdamWSettings(), &layout, {}, AllFloat32(&weights.back()),
          AllFloat32(&gradients), &backend->ops(), &backend->allocator()));
    } else {
      variant.optimizer = bench::OrExit(engine::TieredOptimizer::Create(
          variant.settings, &layout, {}, nullptr, nullptr,
          AllFloat32(&weights.back()), AllFloat32(&gradients), &backend->ops(),
          &backend->allocator()));
    }
  }
  std::printf("example model: %.1fM parameters, %d threads\n", parameters / 1e6,
              absl::GetFlag(FLAGS_threads));
  // Round 0 warms the caches and is not counted.
  for (int round = 0; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    for (Variant& variant : variants) {
      const auto start = std::chrono::steady_clock::now();
      bench::ExitIfError(variant.optimizer->Step(1e-3f, round + 1));
      variant.seconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    }
    if (round == 0) continue;
    for (Variant& variant : variants) {
      variant.ratios.push_back(variant.seconds / variants[0].seconds);
    }
  }
  const int64_t adamw_bytes = Total(variants[0].optimizer->StateBytesByTier());
  std::printf(
      "| optimizer | step | ns / parameter | vs AdamW (median) | "
      "state | of AdamW's |\n| --- | --- | --- | --- | --- | --- |\n");
  nlohmann::json json;
  for (Variant& variant : variants) {
    std::vector<double> ratios = variant.ratios;
    std::sort(ratios.begin(), ratios.end());
    const double median = ratios[ratios.size() / 2];
    const std::map<std::string, int64_t> bytes =
        variant.optimizer->StateBytesByTier();
    std::printf("| %s | %.1f ms | %.2f | %.2fx | %s (%s) | %.1f%% |\n",
                variant.name, 1e3 * variant.seconds,
                1e9 * variant.seconds / parameters, median,
                FormatBytes(Total(bytes)).c_str(), Tiers(bytes).c_str(),
                100.0 * Total(bytes) / adamw_bytes);
    json["example"][variant.name] = {{"step_ratio_to_adamw", ratios},
                                     {"state_bytes", bytes}};
  }

  const engine::ModelConfig seed = SeedShapedConfig();
  const engine::ParameterLayout seed_layout(seed);
  const int64_t seed_parameters = seed_layout.total_elements();
  const int64_t seed_adamw = seed_parameters * 8;
  std::printf(
      "\nOLMoE-shaped %.2fB-parameter MoE (from the shapes): AdamW state %s\n"
      "| optimizer | state | of AdamW's |\n| --- | --- | --- |\n",
      seed_parameters / 1e9, FormatBytes(seed_adamw).c_str());
  for (const Variant& variant : variants) {
    if (variant.adamw) continue;
    const std::map<std::string, int64_t> bytes =
        engine::TieredStateBytesByTier(seed, variant.settings);
    std::printf("| %s | %s (%s) | %.1f%% |\n", variant.name,
                FormatBytes(Total(bytes)).c_str(), Tiers(bytes).c_str(),
                100.0 * Total(bytes) / seed_adamw);
    json["seed_shaped"][variant.name] = bytes;
  }
  bench::WriteJsonResults(json);
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
