#include "kernels/cpu/bf16_speedup.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int kTurns = 5;

struct Product {
  int64_t m, n, k;
  Transpose transpose_a, transpose_b;
};

// Operands of one product in both storage types.
struct Operands {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a_bf16, b_bf16;
};

std::vector<float> Values(int64_t count, float scale) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) {
    values[i] = scale * static_cast<float>((i * 7919) % 2001 - 1000) / 1000.0f;
  }
  return values;
}

GemmArgs ArgsOf(const Product& product, Operands& operands, bool bf16) {
  GemmArgs args;
  args.transpose_a = product.transpose_a;
  args.transpose_b = product.transpose_b;
  args.m = product.m;
  args.n = product.n;
  args.k = product.k;
  args.lda = product.transpose_a == Transpose::kNo ? product.k : product.m;
  args.ldb = product.transpose_b == Transpose::kNo ? product.n : product.k;
  args.ldc = product.n;
  args.c = operands.c.data();
  if (bf16) {
    args.precision = GemmPrecision::kBf16;
    args.a_bf16 = operands.a_bf16.data();
    args.b_bf16 = operands.b_bf16.data();
  } else {
    args.a = operands.a.data();
    args.b = operands.b.data();
  }
  return args;
}

}  // namespace

double MeasureBf16ProductSpeedup(int threads) {
  const Transpose no = Transpose::kNo, yes = Transpose::kYes;
  // The example model's (deploy/examples/tiny-moe.yaml) shapes, 2048 tokens.
  const std::vector<Product> products = {
      {2048, 768, 256, no, yes},  // q, k, v forward
      {2048, 256, 768, no, no},   // their input gradient
      {768, 256, 2048, yes, no},  // their weight gradient
      {512, 512, 256, no, yes},   // an expert's gate and up projections
      {512, 256, 512, no, no},    // their input gradient
      {512, 256, 512, yes, no},   // their weight gradient
  };
  std::vector<Operands> operands(products.size());
  std::vector<GemmArgs> float32, bf16;
  for (size_t i = 0; i < products.size(); ++i) {
    const Product& product = products[i];
    Operands& one = operands[i];
    one.a = Values(product.m * product.k, 1.0f);
    one.b = Values(product.k * product.n, 0.05f);
    one.c.assign(product.m * product.n, 0.0f);
    one.a_bf16.resize(one.a.size());
    one.b_bf16.resize(one.b.size());
    ConvertToBf16(one.a, absl::MakeSpan(one.a_bf16));
    ConvertToBf16(one.b, absl::MakeSpan(one.b_bf16));
    float32.push_back(ArgsOf(product, one, /*bf16=*/false));
    bf16.push_back(ArgsOf(product, one, /*bf16=*/true));
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
