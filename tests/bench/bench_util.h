// What the benchmarks share: ending on an unexpected error (a benchmark has
// no one to hand a Status to), the example model's shape and schedules, and
// a --precision flag's reading.
#ifndef PLATEAU_TESTS_BENCH_BENCH_UTIL_H_
#define PLATEAU_TESTS_BENCH_BENCH_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/model_config.h"
#include "engine/optim/adamw_optimizer.h"

namespace plateau::bench {

// Prints the error and exits with status 1 unless `status` is OK.
inline void ExitIfError(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T OrExit(absl::StatusOr<T> value) {
  ExitIfError(value.status());
  return std::move(value).value();
}

// A --precision flag's value (bf16 or fp32) as the model's products'
// precision; anything else ends the benchmark with a message.
inline kernels::GemmPrecision PrecisionOrExit(const std::string& precision) {
  if (precision == "bf16") return kernels::GemmPrecision::kBf16;
  if (precision == "fp32") return kernels::GemmPrecision::kFloat32;
  std::fprintf(stderr, "--precision: expected bf16 or fp32, got '%s'\n",
               precision.c_str());
  std::exit(1);
}

// deploy/examples/tiny-moe.yaml's model, schedules off.
inline engine::ModelConfig ExampleModelConfig() {
  engine::ModelConfig config;
  config.layers = 4;
  config.d_model = 256;
  config.heads = 8;
  config.kv_heads = 8;
  config.experts = 8;
  config.top_k = 2;
  config.ffn_hidden = 512;
  config.vocab = 4096;
  config.seq_len = 256;
  return config;
}

// The memory schedules a benchmark turns on, each as the example job sets
// it (deploy/examples/tiny-moe.yaml).
struct Schedules {
  bool llep = false, ring_dtp = false, sco = false, offload = false;
};

// `config` with them: dispatch chunks of 1024 copies, Ring-DTP's blocks,
// SCO, and, with the optimizer offloaded under bf16 products, bf16 weight
// storage, as a job's spec sets it (engine/model/model_config.cc).
inline void ApplySchedules(const Schedules& schedules,
                           engine::ModelConfig& config) {
  if (schedules.llep) config.dispatch_chunk_tokens = 1024;
  if (schedules.ring_dtp) {
    config.vocab_block =
        engine::RingDtpVocabBlock(config.d_model, config.vocab);
  }
  config.offload_checkpoints = schedules.sco;
  config.bf16_weight_storage =
      schedules.offload &&
      config.matmul_precision == kernels::GemmPrecision::kBf16;
}

// AdamW's settings for them: OffloadStreamAdamW on `threads` host threads
// when offloaded, the device optimizer otherwise.
inline engine::AdamWSettings AdamWSettingsFor(const Schedules& schedules,
                                              int threads) {
  engine::AdamWSettings settings;
  if (schedules.offload) {
    settings.offload = engine::OptimizerOffload::kStream;
    settings.host_threads = threads;
  }
  return settings;
}

// Forward FLOPs per token by the usual convention: 2 per multiply-add of
// the products, attention at the causal average context; a training step
// is 3 x this (forward + backward), recomputation not counted.
inline double ForwardFlopsPerToken(const engine::ModelConfig& c) {
  const double d = c.d_model, f = c.ffn_hidden;
  const double per_layer = c.qkv_width() * d            // q, k, v
                           + d * d                      // o
                           + c.experts * d              // router
                           + c.top_k * 3 * d * f        // experts
                           + 3 * d * c.shared_hidden()  // shared experts
                           // scores and values at the causal mean context
                           + 2 * d * (c.seq_len + 1) / 2.0;
  return 2.0 * (c.layers * per_layer + c.vocab * d);
}

}  // namespace plateau::bench

#endif  // PLATEAU_TESTS_BENCH_BENCH_UTIL_H_
