// SCO against plain activation checkpointing: the device memory the layer
// boundaries (component `checkpoint`) take over a training step's forward and
// backward, as depth grows, and what the offload costs in step time. Both
// variants run the same model, weights and batch, alternated over rounds; the
// loss and gradients must agree bitwise (SCO only moves bytes). Under
// --precision bf16 the boundaries are bf16 (docs/ARCHITECTURE.md section 8),
// so each takes, and each offload moves, half the bytes.
//
// Usage: checkpoint_offload_bench [--rounds N] [--tokens N]
//   [--precision bf16|fp32] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/byte_size.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"
#include "tests/bench/bench_util.h"

ABSL_FLAG(int, rounds, 3, "timed steps per variant and depth");
ABSL_FLAG(int64_t, tokens, 2048, "tokens per step (sequences of 256)");
ABSL_FLAG(std::string, precision, "fp32", "bf16 or fp32 matrix products");

namespace plateau {
namespace {

using engine::MemoryComponent;
using engine::MemoryPool;

constexpr int64_t kSeqLen = 256;

struct Variant {
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<engine::Model> model;
  std::vector<double> seconds;
  int64_t device_checkpoint_peak_bytes = 0;
  int64_t host_checkpoint_peak_bytes = 0;
  int64_t device_peak_bytes = 0;
  double loss = 0.0;
};

engine::ModelConfig Config(int64_t layers) {
  engine::ModelConfig config;
  config.layers = layers;
  config.d_model = 256;
  config.heads = 4;
  config.kv_heads = 4;
  config.experts = 8;
  config.top_k = 2;
  config.ffn_hidden = 512;
  config.vocab = 4096;
  config.seq_len = kSeqLen;
  config.matmul_precision =
      bench::PrecisionOrExit(absl::GetFlag(FLAGS_precision));
  return config;
}

Variant Make(const engine::ModelConfig& config) {
  Variant variant;
  variant.backend =
      engine::Backend::CreateCpu(2, engine::AccountedAllocator::kUnlimited);
  variant.model = bench::OrExit(engine::Model::Create(
      config, &variant.backend->ops(), &variant.backend->allocator()));
  bench::ExitIfError(variant.model->InitializeWeights(1));
  return variant;
}

void Step(Variant& variant, const std::vector<int32_t>& tokens,
          int64_t sequences) {
  variant.model->ZeroGradients();
  engine::AccountedAllocator& allocator = variant.backend->allocator();
  allocator.ResetPeaks();
  const auto start = std::chrono::steady_clock::now();
  variant.loss =
      bench::OrExit(variant.model->ForwardBackward(tokens.data(), sequences))
          .total();
  variant.seconds.push_back(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  variant.device_checkpoint_peak_bytes =
      allocator.Usage(MemoryPool::kDevice, MemoryComponent::kCheckpoint)
          .peak_bytes;
  variant.host_checkpoint_peak_bytes =
      allocator.Usage(MemoryPool::kHost, MemoryComponent::kCheckpoint)
          .peak_bytes;
  variant.device_peak_bytes =
      allocator.PoolUsage(MemoryPool::kDevice).peak_bytes;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int Main() {
  const int64_t sequences = absl::GetFlag(FLAGS_tokens) / kSeqLen;
  nlohmann::json rows = nlohmann::json::array();
  std::printf(
      "%lld tokens a step, d_model 256, precision %s; device `checkpoint` "
      "peak over forward + backward\n%6s | %-12s | %-26s | %-12s | %s\n",
      static_cast<long long>(sequences * kSeqLen),
      absl::GetFlag(FLAGS_precision).c_str(), "layers", "plain", "SCO (host)",
      "reduction", "SCO step time / plain");
  for (const int64_t layers :
       {int64_t{2}, int64_t{4}, int64_t{8}, int64_t{16}}) {
    engine::ModelConfig config = Config(layers);
    Variant plain = Make(config);
    config.offload_checkpoints = true;
    Variant offloaded = Make(config);
    std::mt19937 rng(2);
    std::vector<int32_t> tokens(sequences * (kSeqLen + 1));
    for (int32_t& token : tokens) token = rng() % config.vocab;
    // One untimed step each warms the allocators' caches.
    Step(plain, tokens, sequences);
    Step(offloaded, tokens, sequences);
    plain.seconds.clear();
    offloaded.seconds.clear();
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      Step(plain, tokens, sequences);
      Step(offloaded, tokens, sequences);
    }
    const engine::Tensor& a = plain.model->gradients();
    const engine::Tensor& b = offloaded.model->gradients();
    if (plain.loss != offloaded.loss ||
        !std::equal(a.f32(), a.f32() + a.elements(), b.f32())) {
      std::fprintf(stderr,
                   "SCO changed the loss or a gradient at %lld layers\n",
                   static_cast<long long>(layers));
      return 1;
    }
    const double time_ratio = Median(offloaded.seconds) / Median(plain.seconds);
    const double reduction =
        1.0 - static_cast<double>(offloaded.device_checkpoint_peak_bytes) /
                  static_cast<double>(plain.device_checkpoint_peak_bytes);
    std::printf("%6lld | %-12s | %-26s | %-12s | %.3f (%.2f s vs %.2f s)\n",
                static_cast<long long>(layers),
                FormatBytes(plain.device_checkpoint_peak_bytes).c_str(),
                (FormatBytes(offloaded.device_checkpoint_peak_bytes) + " (" +
                 FormatBytes(offloaded.host_checkpoint_peak_bytes) + ")")
                    .c_str(),
                absl::StrFormat("-%.1f%%", 100 * reduction).c_str(), time_ratio,
                Median(offloaded.seconds), Median(plain.seconds));
    std::fflush(stdout);
    rows.push_back({{"precision", absl::GetFlag(FLAGS_precision)},
                    {"layers", layers},
                    {"tokens", sequences * kSeqLen},
                    {"plain_device_checkpoint_peak_bytes",
                     plain.device_checkpoint_peak_bytes},
                    {"plain_device_peak_bytes", plain.device_peak_bytes},
                    {"sco_device_checkpoint_peak_bytes",
                     offloaded.device_checkpoint_peak_bytes},
                    {"sco_device_peak_bytes", offloaded.device_peak_bytes},
                    {"sco_host_checkpoint_peak_bytes",
                     offloaded.host_checkpoint_peak_bytes},
                    {"plain_step_seconds", Median(plain.seconds)},
                    {"sco_step_seconds", Median(offloaded.seconds)}});
  }
  bench::WriteJsonResults(rows);
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Main);
}
