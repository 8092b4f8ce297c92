// Training throughput of the example model (deploy/examples/tiny-moe.yaml's
// shape: d_model 256, 4 layers, 8 heads, 8 experts top-2, ffn 512, vocab
// 4096, seq_len 256, 2,048 tokens per step) on the CPU backend, in either
// precision, next to the machine's matrix-product rate measured in the same
// run: model FLOP utilisation. The reference is a 2048^3 product of that
// precision through the CPU backend's ops: sgemm for fp32, for bf16 the
// kernel its bf16 products take (oneDNN's, or the fixed-order one) on bf16
// inputs. Random tokens: the rate does not depend on the data.
//
// Model FLOPs: bench::ForwardFlopsPerToken (bench_util.h).
//
// --experts and --top_k widen the expert bank at the same tokens per step
// (the experts-scaling comparison of docs/BENCHMARKS.md). --schedules
// turns on memory schedules as the example job sets them (dispatch chunks
// of 1024 copies, Ring-DTP's blocks, SCO, the streamed offloaded AdamW with
// bf16 weight storage under bf16), so that --profile can say where a
// scheduled step's time goes; schedules_cost_bench measures their cost.
//
// Usage: train_throughput_bench [--steps N] [--threads N] [--checkpointing
// true|false] [--precision bf16|fp32] [--experts N] [--top_k K]
// [--schedules llep,ring_dtp,sco,offload] [--profile] [--json FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "engine/backend.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/model/model.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/zero_shards.h"
#include "engine/train/model_io.h"
#include "engine/train/rank_context.h"
#include "engine/train/training_step.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_ops.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/profiling_ops.h"

ABSL_FLAG(int64_t, steps, 10, "timed training steps (after 2 warm-up steps)");
ABSL_FLAG(int32_t, threads, 2, "kernel threads");
ABSL_FLAG(bool, checkpointing, true, "activation checkpointing");
ABSL_FLAG(std::string, precision, "fp32", "bf16 or fp32 matrix products");
ABSL_FLAG(int64_t, experts, 8, "experts per layer");
ABSL_FLAG(int64_t, top_k, 2, "experts per token");
ABSL_FLAG(int64_t, kv_heads, 0,
          "key and value heads (grouped-query attention); 0: every head");
ABSL_FLAG(bool, qk_norm, false, "QK-norm (model.qk_norm)");
ABSL_FLAG(int64_t, shared_experts, 0,
          "shared experts of ffn_hidden each (model.shared_experts)");
ABSL_FLAG(std::vector<std::string>, schedules, {},
          "memory schedules, comma-separated: llep, ring_dtp, sco, offload");
ABSL_FLAG(bool, profile, false,
          "time every op (adds a little overhead) and print the breakdown");

namespace plateau {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// FLOP/s of a square 2048^3 product through the same ops (threads, splits,
// the kernel the step's products take): float32, or bf16 from bf16 inputs;
// the best of five.
double MeasureProductFlops(kernels::Ops& ops, bool bf16) {
  constexpr int64_t kSize = 2048;
  std::vector<float> a(kSize * kSize, 0.5f), b(kSize * kSize, 0.25f),
      c(kSize * kSize);
  std::vector<uint16_t> a_bf16(a.size()), b_bf16(b.size());
  kernels::cpu::ConvertToBf16(a, absl::MakeSpan(a_bf16));
  kernels::cpu::ConvertToBf16(b, absl::MakeSpan(b_bf16));
  kernels::GemmArgs args;
  args.m = args.n = args.k = kSize;
  args.lda = args.ldb = args.ldc = kSize;
  args.c = c.data();
  if (bf16) {
    args.precision = kernels::GemmPrecision::kBf16;
    args.a_bf16 = a_bf16.data();
    args.b_bf16 = b_bf16.data();
  } else {
    args.a = a.data();
    args.b = b.data();
  }
  ops.Gemm(args);  // warm up
  double best = 0.0;
  for (int repeat = 0; repeat < 5; ++repeat) {
    const auto start = Clock::now();
    ops.Gemm(args);
    best = std::max(best, 2.0 * kSize * kSize * kSize / Seconds(start));
  }
  return best;
}

int Run() {
  engine::ModelConfig config = bench::ExampleModelConfig();
  config.activation_checkpointing = absl::GetFlag(FLAGS_checkpointing);
  const std::string precision = absl::GetFlag(FLAGS_precision);
  config.matmul_precision = bench::PrecisionOrExit(precision);
  const bool bf16 = config.matmul_precision == kernels::GemmPrecision::kBf16;
  config.experts = absl::GetFlag(FLAGS_experts);
  config.top_k = absl::GetFlag(FLAGS_top_k);
  if (absl::GetFlag(FLAGS_kv_heads) != 0) {
    config.kv_heads = absl::GetFlag(FLAGS_kv_heads);
    if (config.kv_heads < 1 || config.heads % config.kv_heads != 0) {
      std::fprintf(stderr, "--kv_heads must divide the %lld heads, got %lld\n",
                   static_cast<long long>(config.heads),
                   static_cast<long long>(config.kv_heads));
      return 1;
    }
  }
  config.qk_norm = absl::GetFlag(FLAGS_qk_norm);
  config.shared_experts = absl::GetFlag(FLAGS_shared_experts);
  config.shared_ffn_hidden = config.ffn_hidden;
  if (config.shared_experts < 0) {
    std::fprintf(stderr, "--shared_experts must be at least 0, got %lld\n",
                 static_cast<long long>(config.shared_experts));
    return 1;
  }
  if (config.top_k < 1 || config.top_k > config.experts) {
    std::fprintf(stderr,
                 "--top_k must be in [1, --experts], got %lld of %lld\n",
                 static_cast<long long>(config.top_k),
                 static_cast<long long>(config.experts));
    return 1;
  }
  bench::Schedules schedules;
  for (const std::string& schedule : absl::GetFlag(FLAGS_schedules)) {
    if (schedule == "llep") {
      schedules.llep = true;
    } else if (schedule == "ring_dtp") {
      schedules.ring_dtp = true;
    } else if (schedule == "sco") {
      schedules.sco = true;
    } else if (schedule == "offload") {
      schedules.offload = true;
    } else {
      std::fprintf(stderr,
                   "--schedules: unknown schedule \"%s\" (known: llep, "
                   "ring_dtp, sco, offload)\n",
                   schedule.c_str());
      return 1;
    }
  }
  bench::ApplySchedules(schedules, config);
  const int64_t sequences = 8;  // 2,048 tokens per step
  const int64_t tokens_per_step = sequences * config.seq_len;

  const int threads = absl::GetFlag(FLAGS_threads);
  std::unique_ptr<engine::Backend> backend = engine::Backend::CreateCpu(
      threads, engine::AccountedAllocator::kUnlimited);
  kernels::Ops& cpu_ops = backend->ops();
  engine::AccountedAllocator& allocator = backend->allocator();
  bench::ProfilingOps profiling_ops(&cpu_ops);
  kernels::Ops& ops = absl::GetFlag(FLAGS_profile)
                          ? static_cast<kernels::Ops&>(profiling_ops)
                          : cpu_ops;
  auto model = engine::Model::Create(config, &ops, &allocator).value();
  if (const absl::Status status = model->InitializeWeights(1); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  engine::ZeroShards shards(model->layout(), nullptr, nullptr);
  auto optimizer =
      engine::AdamWOptimizer::Create(
          bench::AdamWSettingsFor(schedules, threads), &model->layout(),
          shards.owned(), model->weight_buffers(), model->gradient_buffers(),
          &ops, &allocator)
          .value();
  engine::InitializeMasters(1, model->layout(), optimizer->MasterPieces());
  engine::TrainingStep training_step(engine::RankContext(), model.get(),
                                     &shards, optimizer.get(),
                                     /*micro_batches=*/1, &allocator);
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(sequences * (config.seq_len + 1));
  auto step = [&](int64_t index) {
    for (int32_t& token : tokens) token = static_cast<int32_t>(rng() % 4096);
    training_step.Run(tokens.data(), sequences, 1e-3f, index, 1.0).value();
  };
  // The machine is shared: its product rate is measured on both sides of
  // the timed steps and averaged.
  const auto reference_flops = [&] {
    return MeasureProductFlops(cpu_ops, bf16);
  };
  const double reference_before = reference_flops();
  step(1);
  step(2);
  profiling_ops.Reset();
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step(3 + i);
  const double elapsed = Seconds(start);
  const double tokens_per_second = steps * tokens_per_step / elapsed;
  if (absl::GetFlag(FLAGS_profile)) {
    std::printf("%-22s %9s %7s %8s %9s\n", "op", "ms/step", "share", "calls",
                "GFLOP/s");
    for (const auto& [name, time] : profiling_ops.times()) {
      std::printf("%-22s %9.2f %6.1f%% %8lld %9.1f\n", name.c_str(),
                  1e3 * time.seconds / steps, 100.0 * time.seconds / elapsed,
                  static_cast<long long>(time.calls / steps),
                  time.multiply_adds > 0
                      ? 2.0 * time.multiply_adds / time.seconds / 1e9
                      : 0.0);
    }
  }
  const double reference = (reference_before + reference_flops()) / 2;
  const char* reference_name = bf16 ? "bf16 2048^3" : "sgemm 2048^3";
  const double model_flops =
      3.0 * bench::ForwardFlopsPerToken(config) * tokens_per_second;

  std::printf(
      "threads %d, activation checkpointing %s, schedules %s, precision %s, "
      "%lld experts (top %lld, %lld shared), %lld heads (%lld key-value%s), "
      "OpenBLAS core %s, attention's blocks through %s\n",
      threads, config.activation_checkpointing ? "on" : "off",
      absl::GetFlag(FLAGS_schedules).empty()
          ? "none"
          : absl::StrJoin(absl::GetFlag(FLAGS_schedules), ",").c_str(),
      precision.c_str(), static_cast<long long>(config.experts),
      static_cast<long long>(config.top_k),
      static_cast<long long>(config.shared_experts),
      static_cast<long long>(config.heads),
      static_cast<long long>(config.kv_heads),
      config.qk_norm ? ", QK-norm" : "", kernels::cpu::Blas().corename(),
      kernels::cpu::CpuOps::AttentionBlocksThroughOneDnn() ? "oneDNN"
                                                           : "OpenBLAS");
  std::printf("training: %.0f tokens/s (%lld steps of %lld tokens)\n",
              tokens_per_second, static_cast<long long>(steps),
              static_cast<long long>(tokens_per_step));
  std::printf("model FLOPs: %.1f GFLOP/s (%.1f MFLOP/token)\n",
              model_flops / 1e9,
              3.0 * bench::ForwardFlopsPerToken(config) / 1e6);
  std::printf("%s: %.1f GFLOP/s\n", reference_name, reference / 1e9);
  std::printf("model FLOP utilisation: %.1f%% of %s\n",
              100.0 * model_flops / reference, reference_name);
  bench::WriteJsonResults(
      {{"threads", threads},
       {"activation_checkpointing", config.activation_checkpointing},
       {"schedules", absl::GetFlag(FLAGS_schedules)},
       {"precision", precision},
       {"experts", config.experts},
       {"top_k", config.top_k},
       {"tokens_per_second", tokens_per_second},
       {"model_flops_per_second", model_flops},
       {"reference_flops_per_second", reference},
       {"reference", reference_name},
       {"model_flop_utilisation", model_flops / reference}});
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
