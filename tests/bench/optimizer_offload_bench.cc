// OffloadStreamAdamW's step against its serial baseline (copy every gradient
// to the host, update all, copy every weight back), with AdamW on the device
// as the reference: step time and where the state lives, for a model of
// about --parameters_millions parameters. The variants run alternated over
// rounds; their weights must agree bitwise after every round.
//
// Usage: optimizer_offload_bench [--rounds N] [--threads N]
//                                [--bucket_elements N] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "common/byte_size.h"
#include "engine/backend.h"
#include "engine/model/parameter_layout.h"
#include "engine/optim/adamw_optimizer.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"
#include "tests/bench/bench_util.h"

ABSL_FLAG(int, rounds, 5, "timed steps per variant");
ABSL_FLAG(int, threads, 2, "host threads of the update");
ABSL_FLAG(int64_t, bucket_elements, int64_t{1} << 18,
          "OffloadStreamAdamW's bucket");

namespace plateau {
namespace {

using engine::MemoryComponent;
using engine::MemoryPool;
using engine::OptimizerOffload;

// 8 layers of 8 experts at d_model 512, vocab 32k: about 142M parameters.
engine::ModelConfig Config() {
  engine::ModelConfig config;
  config.layers = 8;
  config.d_model = 512;
  config.heads = 8;
  config.kv_heads = 8;
  config.experts = 8;
  config.top_k = 2;
  config.ffn_hidden = 1024;
  config.vocab = 32000;
  config.seq_len = 256;
  return config;
}

struct Variant {
  const char* name = "";
  OptimizerOffload offload = OptimizerOffload::kNone;
  std::unique_ptr<engine::Backend> backend;
  engine::Tensor weights;
  engine::Tensor gradients;
  std::unique_ptr<engine::AdamWOptimizer> optimizer;
  std::vector<double> seconds;
};

void Make(Variant& variant, const engine::ParameterLayout& layout) {
  const int threads = absl::GetFlag(FLAGS_threads);
  variant.backend = engine::Backend::CreateCpu(
      threads, engine::AccountedAllocator::kUnlimited);
  engine::AccountedAllocator& allocator = variant.backend->allocator();
  const int64_t count = layout.total_elements();
  variant.weights = bench::OrExit(engine::Tensor::Create(
      allocator, MemoryPool::kDevice, MemoryComponent::kWeights, {count}));
  variant.gradients = bench::OrExit(engine::Tensor::Create(
      allocator, MemoryPool::kDevice, MemoryComponent::kGradients, {count}));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int64_t i = 0; i < count; ++i) {
    variant.weights.f32()[i] = normal(rng);
    variant.gradients.f32()[i] = normal(rng);
  }
  engine::AdamWSettings settings;
  settings.offload = variant.offload;
  settings.bucket_elements = absl::GetFlag(FLAGS_bucket_elements);
  settings.host_threads = threads;
  variant.optimizer = bench::OrExit(engine::AdamWOptimizer::Create(
      settings, &layout, {}, AllFloat32(&variant.weights),
      AllFloat32(&variant.gradients), &variant.backend->ops(), &allocator));
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int Main() {
  const engine::ParameterLayout layout(Config());
  const int64_t count = layout.total_elements();
  Variant variants[3];
  const std::pair<const char*, OptimizerOffload> kinds[] = {
      {"device AdamW", OptimizerOffload::kNone},
      {"serial offload", OptimizerOffload::kSerial},
      {"OffloadStreamAdamW", OptimizerOffload::kStream}};
  for (int i = 0; i < 3; ++i) {
    variants[i].name = kinds[i].first;
    variants[i].offload = kinds[i].second;
    Make(variants[i], layout);
  }
  for (int round = 0; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    for (Variant& variant : variants) {
      const auto start = std::chrono::steady_clock::now();
      bench::ExitIfError(variant.optimizer->Step(1e-3f, round + 1));
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      if (round > 0) variant.seconds.push_back(seconds);  // round 0 warms up
    }
    for (const Variant& variant : variants) {
      if (!std::equal(variant.weights.f32(), variant.weights.f32() + count,
                      variants[0].weights.f32())) {
        std::fprintf(stderr, "%s differs from AdamW on the device\n",
                     variant.name);
        return 1;
      }
    }
  }
  std::printf("%.1fM parameters, %d host threads, buckets of %lld elements\n",
              count / 1e6, absl::GetFlag(FLAGS_threads),
              static_cast<long long>(absl::GetFlag(FLAGS_bucket_elements)));
  std::printf("%-20s | %-9s | %-14s | %-14s | %-14s | %s\n", "variant", "step",
              "device state", "host state", "host staging", "serial / this");
  const double serial = Median(variants[1].seconds);
  nlohmann::json rows = nlohmann::json::array();
  for (const Variant& variant : variants) {
    const engine::AccountedAllocator& allocator = variant.backend->allocator();
    const int64_t device_state =
        allocator.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer)
            .peak_bytes;
    const int64_t host_state =
        allocator.Usage(MemoryPool::kHost, MemoryComponent::kOptimizer)
            .peak_bytes +
        allocator.Usage(MemoryPool::kHost, MemoryComponent::kWeights)
            .peak_bytes;
    const int64_t staging =
        allocator.Usage(MemoryPool::kHost, MemoryComponent::kStaging)
            .peak_bytes;
    const double seconds = Median(variant.seconds);
    std::printf("%-20s | %.3f s | %-14s | %-14s | %-14s | %.2fx\n",
                variant.name, seconds, FormatBytes(device_state).c_str(),
                FormatBytes(host_state).c_str(), FormatBytes(staging).c_str(),
                serial / seconds);
    rows.push_back({{"variant", variant.name},
                    {"parameters", count},
                    {"step_seconds", seconds},
                    {"device_optimizer_bytes", device_state},
                    {"host_state_bytes", host_state},
                    {"host_staging_bytes", staging},
                    {"speedup_over_serial", serial / seconds}});
  }
  bench::WriteJsonResults(rows);
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Main);
}
