// The CPU backend's matrix products (CpuOps::Gemm and GroupedGemm) on the
// shapes of the example model's training step (2048 tokens on one rank,
// d_model 256, experts of 512, vocab 4096; by default 8 experts at top 2,
// so 512 rows each): the forward products (x W^T), the input gradients
// (dy W) and the weight gradients (dy^T x), and the vocabulary's forward a
// 256-token block at a time (as the engine runs it), in float32 and with
// bf16 operands (as the engine passes them in bf16: activations and weights
// both stored in bf16). --experts and --top_k set the experts' rows
// (2048 x top_k / experts each), as an expert's batch shrinks with more of
// them.
// This is what the pieces products are cut into (kernels/cpu/thread_pool.h
// PiecesOfProduct) cost or gain: GFLOP/s per product, each the best of
// --rounds rounds of at least --min_seconds.
//
// Usage: cpu_products_bench [--threads T] [--rounds R] [--min_seconds S]
//   [--experts E] [--top_k K] [--json FILE]
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/timed_products.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"

ABSL_FLAG(int32_t, threads, 2, "kernel threads");
ABSL_FLAG(int32_t, rounds, 3, "timed rounds per figure; the best is kept");
ABSL_FLAG(double, min_seconds, 0.3, "each round repeats for at least this");
ABSL_FLAG(int32_t, experts, 8, "experts of the MoE layer");
ABSL_FLAG(int32_t, top_k, 2, "experts per token");

namespace plateau {
namespace {

using kernels::GemmArgs;
using kernels::Transpose;

// `count` products of one shape, one call.
struct Product {
  std::string name;
  int count;
  kernels::cpu::ProductShape shape;
};

int Run() {
  kernels::cpu::CpuOps ops(absl::GetFlag(FLAGS_threads));
  const Transpose no = Transpose::kNo, yes = Transpose::kYes;
  const int experts = absl::GetFlag(FLAGS_experts);
  const int64_t top_k = absl::GetFlag(FLAGS_top_k);
  if (experts < 1 || top_k < 1 || top_k > experts) {
    std::fprintf(stderr,
                 "cpu_products_bench: --top_k must be 1 to --experts (%d), "
                 "got %lld\n",
                 experts, static_cast<long long>(top_k));
    return 1;
  }
  const int64_t rows = 2048 * top_k / experts;
  const std::vector<Product> products = {
      {"qkv forward", 1, {2048, 768, 256, no, yes}},
      {"qkv input gradient", 1, {2048, 256, 768, no, no}},
      {"qkv weight gradient", 1, {768, 256, 2048, yes, no}},
      {"attention output forward", 1, {2048, 256, 256, no, yes}},
      {"experts gate+up forward", 2 * experts, {rows, 512, 256, no, yes}},
      {"experts down forward", experts, {rows, 256, 512, no, yes}},
      {"experts down input gradient", experts, {rows, 512, 256, no, no}},
      {"experts down weight gradient", experts, {256, 512, rows, yes, no}},
      {"experts gate input gradient", experts, {rows, 256, 512, no, no}},
      {"experts gate+up weight gradient",
       2 * experts,
       {512, 256, rows, yes, no}},
      {"vocab forward", 1, {2048, 4096, 256, no, yes}},
      {"vocab forward, a 256-token block", 1, {256, 4096, 256, no, yes}},
      {"vocab input gradient", 1, {2048, 256, 4096, no, no}},
      {"vocab weight gradient", 1, {4096, 256, 2048, yes, no}},
  };
  nlohmann::json results = {{"threads", ops.threads()},
                            {"experts", experts},
                            {"top_k", top_k},
                            {"openblas_core", kernels::cpu::Blas().corename()},
                            {"products", nlohmann::json::array()}};
  std::printf("threads %d, OpenBLAS core %s, %d experts at top %lld\n",
              ops.threads(), kernels::cpu::Blas().corename(), experts,
              static_cast<long long>(top_k));
  std::printf("%-34s %6s %18s %10s %10s\n", "product", "count", "m x n x k",
              "fp32", "bf16");
  for (const Product& product : products) {
    std::vector<kernels::cpu::ProductOperands> operands;
    operands.reserve(product.count);
    for (int i = 0; i < product.count; ++i)
      operands.emplace_back(product.shape);
    double gflops[2];
    for (const bool bf16 : {false, true}) {
      std::vector<GemmArgs> problems;
      for (kernels::cpu::ProductOperands& one : operands) {
        problems.push_back(one.Args(bf16));
      }
      const double seconds = bench::BestSecondsPerCall(
          [&] {
            if (problems.size() == 1) {
              ops.Gemm(problems[0]);
            } else {
              ops.GroupedGemm(problems);
            }
          },
          absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_min_seconds));
      gflops[bf16] = 2.0 * product.count * product.shape.m * product.shape.n *
                     product.shape.k / seconds / 1e9;
    }
    if (!ops.status().ok()) {
      std::fprintf(stderr, "cpu_products_bench: %s\n",
                   std::string(ops.status().message()).c_str());
      return 1;
    }
    const kernels::cpu::ProductShape& dims = product.shape;
    const std::string shape = std::to_string(dims.m) + " x " +
                              std::to_string(dims.n) + " x " +
                              std::to_string(dims.k);
    std::printf("%-34s %6d %18s %10.1f %10.1f\n", product.name.c_str(),
                product.count, shape.c_str(), gflops[0], gflops[1]);
    results["products"].push_back({{"name", product.name},
                                   {"count", product.count},
                                   {"m", dims.m},
                                   {"n", dims.n},
                                   {"k", dims.k},
                                   {"fp32_gflops", gflops[0]},
                                   {"bf16_gflops", gflops[1]}});
  }
  bench::WriteJsonResults(results);
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
