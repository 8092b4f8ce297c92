// Reach: the longest sequence that trains (one sequence, a whole step:
// forward, backward and the optimizer update) under a fixed device cap, with
// the plain step (activation checkpointing, AdamW on the device) and with the
// four memory schedules together, in fp32 and in bf16 (which stores the
// products' inputs, attention's q, k, v and output and the layer boundaries
// in bf16: docs/ARCHITECTURE.md section 8). A length trains when no
// allocation of the step exceeds the cap (the accounted allocator fails exactly
// as a full GPU would); lengths double until one fails, then bisection narrows
// the gap to an eighth of it.
//
// Usage: reach_bench [--device_memory BYTES] [--json FILE]
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/byte_size.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/optim/adamw_optimizer.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"
#include "tests/bench/bench_util.h"

ABSL_FLAG(int64_t, device_memory, int64_t{256} << 20, "the device cap");

namespace plateau {
namespace {

using engine::MemoryComponent;
using engine::MemoryPool;

// A small MoE with a 32k vocabulary: about 9M parameters.
engine::ModelConfig Config(int64_t seq_len, bool scheduled,
                           kernels::GemmPrecision precision) {
  engine::ModelConfig config;
  config.layers = 2;
  config.d_model = 128;
  config.heads = 2;
  config.kv_heads = 2;
  config.experts = 4;
  config.top_k = 2;
  config.ffn_hidden = 256;
  config.vocab = 32000;
  config.seq_len = seq_len;
  config.matmul_precision = precision;
  if (scheduled) {
    config.dispatch_chunk_tokens = 1024;
    config.vocab_block =
        engine::RingDtpVocabBlock(config.d_model, config.vocab);
    config.offload_checkpoints = true;
  }
  return config;
}

struct Trial {
  bool trained = false;
  int64_t device_peak_bytes = 0;
  std::vector<std::pair<std::string, int64_t>> component_peaks;
};

// One training step at seq_len; RESOURCE_EXHAUSTED is "does not train",
// anything else ends the benchmark.
Trial Try(int64_t seq_len, bool scheduled, kernels::GemmPrecision precision) {
  std::unique_ptr<engine::Backend> backend =
      engine::Backend::CreateCpu(2, absl::GetFlag(FLAGS_device_memory));
  engine::AccountedAllocator& allocator = backend->allocator();
  const engine::ModelConfig config = Config(seq_len, scheduled, precision);
  Trial trial;
  absl::Status status = [&]() -> absl::Status {
    auto model = engine::Model::Create(config, &backend->ops(), &allocator);
    if (!model.ok()) return model.status();
    if (absl::Status s = (*model)->InitializeWeights(1); !s.ok()) return s;
    engine::AdamWSettings settings;
    settings.offload = scheduled ? engine::OptimizerOffload::kStream
                                 : engine::OptimizerOffload::kNone;
    settings.host_threads = 2;
    auto optimizer = engine::AdamWOptimizer::Create(
        settings, &(*model)->layout(), {}, (*model)->weight_buffers(),
        (*model)->gradient_buffers(), &backend->ops(), &allocator);
    if (!optimizer.ok()) return optimizer.status();
    std::mt19937 rng(3);
    std::vector<int32_t> tokens(seq_len + 1);
    for (int32_t& token : tokens) token = rng() % config.vocab;
    auto loss = (*model)->ForwardBackward(tokens.data(), 1);
    if (!loss.ok()) return loss.status();
    return (*optimizer)->Step(1e-3f, 1);
  }();
  if (!absl::IsResourceExhausted(status)) bench::ExitIfError(status);
  trial.trained = status.ok();
  trial.device_peak_bytes = allocator.PoolUsage(MemoryPool::kDevice).peak_bytes;
  for (int c = 0; c < engine::kMemoryComponentCount; ++c) {
    const auto component = static_cast<MemoryComponent>(c);
    const int64_t peak =
        allocator.Usage(MemoryPool::kDevice, component).peak_bytes;
    if (peak > 0) {
      trial.component_peaks.push_back(
          {engine::MemoryComponentName(component), peak});
    }
  }
  return trial;
}

struct Reach {
  int64_t seq_len = 0;
  Trial trial;
};

Reach FindReach(bool scheduled, kernels::GemmPrecision precision) {
  Reach reach;
  int64_t failed = 0;
  for (int64_t seq_len = 256;; seq_len *= 2) {
    Trial trial = Try(seq_len, scheduled, precision);
    if (!trial.trained) {
      failed = seq_len;
      break;
    }
    reach = {seq_len, std::move(trial)};
  }
  if (reach.seq_len == 0) return reach;
  const int64_t step = std::max<int64_t>(1, (failed - reach.seq_len) / 8);
  while (failed - reach.seq_len > step) {
    const int64_t middle =
        reach.seq_len + (failed - reach.seq_len) / 2 / step * step;
    Trial trial = Try(middle, scheduled, precision);
    if (trial.trained) {
      reach = {middle, std::move(trial)};
    } else {
      failed = middle;
    }
  }
  return reach;
}

int Main() {
  const int64_t cap = absl::GetFlag(FLAGS_device_memory);
  std::printf(
      "device cap %s; 2 layers, d_model 128, 4 experts (top 2), vocab 32000; "
      "one sequence a step\n",
      FormatBytes(cap).c_str());
  nlohmann::json rows = nlohmann::json::array();
  int64_t baseline = 0;
  for (const kernels::GemmPrecision precision :
       {kernels::GemmPrecision::kFloat32, kernels::GemmPrecision::kBf16}) {
    const bool bf16 = precision == kernels::GemmPrecision::kBf16;
    for (const bool scheduled : {false, true}) {
      const Reach reach = FindReach(scheduled, precision);
      // Ratios against the plain fp32 step.
      if (!scheduled && !bf16) baseline = reach.seq_len;
      std::string components;
      nlohmann::json peaks = nlohmann::json::object();
      for (const auto& [name, bytes] : reach.trial.component_peaks) {
        components += " " + name + " " + FormatBytes(bytes) + ",";
        peaks[name] = bytes;
      }
      if (!components.empty()) components.pop_back();
      std::printf(
          "%s %-14s reach %6lld tokens (%.1fx); at it, device peak %s:%s\n",
          bf16 ? "bf16" : "fp32", scheduled ? "all schedules" : "plain",
          static_cast<long long>(reach.seq_len),
          baseline > 0 ? static_cast<double>(reach.seq_len) / baseline : 0.0,
          FormatBytes(reach.trial.device_peak_bytes).c_str(),
          components.c_str());
      std::fflush(stdout);
      rows.push_back({{"variant", scheduled ? "all_schedules" : "plain"},
                      {"precision", bf16 ? "bf16" : "fp32"},
                      {"device_memory_bytes", cap},
                      {"reach_seq_len", reach.seq_len},
                      {"device_peak_bytes", reach.trial.device_peak_bytes},
                      {"component_peak_bytes", peaks}});
    }
  }
  bench::WriteJsonResults(rows);
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Main);
}
