#include "kernels/cpu/bf16_speedup.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/timed_products.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int kTurns = 5;

}  // namespace

double MeasureBf16ProductSpeedup(int threads) {
  const Transpose no = Transpose::kNo, yes = Transpose::kYes;
  // The example model's (deploy/examples/tiny-moe.yaml) shapes, 2048 tokens.
  const std::vector<ProductShape> shapes = {
      {2048, 768, 256, no, yes},  // q, k, v forward
      {2048, 256, 768, no, no},   // their input gradient
      {768, 256, 2048, yes, no},  // their weight gradient
      {512, 512, 256, no, yes},   // an expert's gate and up projections
      {512, 256, 512, no, no},    // their input gradient
      {512, 256, 512, yes, no},   // their weight gradient
  };
  std::vector<ProductOperands> operands;
  operands.reserve(shapes.size());
  std::vector<GemmArgs> float32, bf16;
  for (const ProductShape& shape : shapes) {
    operands.emplace_back(shape);
    float32.push_back(operands.back().Args(/*bf16=*/false));
    bf16.push_back(operands.back().Args(/*bf16=*/true));
  }
  CpuOps ops(threads);
  const auto seconds = [&](const std::vector<GemmArgs>& problems) {
    const auto start = std::chrono::steady_clock::now();
    for (const GemmArgs& args : problems) ops.Gemm(args);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  // A first turn of each makes the kernels and touches the memory.
  seconds(float32);
  seconds(bf16);
  double best_float32 = std::numeric_limits<double>::infinity();
  double best_bf16 = std::numeric_limits<double>::infinity();
  for (int turn = 0; turn < kTurns; ++turn) {
    best_float32 = std::min(best_float32, seconds(float32));
    best_bf16 = std::min(best_bf16, seconds(bf16));
  }
  return best_float32 / best_bf16;
}

}  // namespace plateau::kernels::cpu
