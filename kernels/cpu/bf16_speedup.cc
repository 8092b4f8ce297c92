#include "kernels/cpu/bf16_speedup.h"

#include <time.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/timed_products.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int kPairs = 7;

// The calling thread's CPU time: what the products cost it, without the
// time other processes held its core.
double ThreadCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * now.tv_nsec;
}

}  // namespace

double MeasureBf16ProductSpeedup() {
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
  // One thread: the pool's part 0 and oneDNN's one OpenMP thread are the
  // calling thread, so its CPU time is all the products' work.
  CpuOps ops(1);
  const auto seconds = [&](const std::vector<GemmArgs>& problems) {
    const double start = ThreadCpuSeconds();
    for (const GemmArgs& args : problems) ops.Gemm(args);
    return ThreadCpuSeconds() - start;
  };
  // A first turn of each makes the kernels and touches the memory.
  seconds(float32);
  seconds(bf16);
  std::vector<double> ratios;
  for (int pair = 0; pair < kPairs; ++pair) {
    const double float32_seconds = seconds(float32);
    ratios.push_back(float32_seconds / seconds(bf16));
  }
  std::nth_element(ratios.begin(), ratios.begin() + kPairs / 2, ratios.end());
  return ratios[kPairs / 2];
}

}  // namespace plateau::kernels::cpu
