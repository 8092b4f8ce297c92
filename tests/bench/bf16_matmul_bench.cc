// bf16 against float32 matrix products on this CPU, in one run: the CPU
// backend's GEMM today (OpenBLAS sgemm), oneDNN's float32 matmul, and
// oneDNN's bf16 matmul (bf16 inputs, float32 accumulation and output; the
// CPU backend's bf16 GEMM, kernels/cpu/onednn_matmul.h), on
// square and MoE-like shapes. Reports GFLOP/s (best of --rounds, each at
// least --min_seconds of repeats) and each bf16 time as a ratio to
// OpenBLAS's. Debian's OpenBLAS has no bf16 GEMM (cblas_sbgemm is not
// exported), so there is no sbgemm column.
//
// Usage: bf16_matmul_bench [--threads T] [--rounds R] [--min_seconds S]
//   [--json FILE]
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/onednn_matmul.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"

ABSL_FLAG(int32_t, threads, 2, "threads of OpenBLAS and oneDNN");
ABSL_FLAG(int32_t, rounds, 3, "timed rounds per kernel; the best is kept");
ABSL_FLAG(double, min_seconds, 0.3, "each round repeats for at least this");

namespace plateau {
namespace {

using kernels::cpu::MatmulInput;
using kernels::cpu::MatmulLayout;
using kernels::cpu::OneDnnMatmul;

struct Shape {
  const char* what;
  int64_t m, k, n;
};

// Seconds per call (bench::BestSecondsPerCall, warmed first: first-touch pages,
// oneDNN's kernel caches).
double TimeCall(const std::function<void()>& call) {
  return bench::BestSecondsPerCall(call, absl::GetFlag(FLAGS_rounds),
                                   absl::GetFlag(FLAGS_min_seconds));
}

int Run() {
  const absl::Status blas = kernels::cpu::BlasStatus();
  if (!blas.ok()) {
    std::fprintf(stderr, "%s\n", std::string(blas.message()).c_str());
    return 1;
  }
  kernels::cpu::Blas().set_num_threads(absl::GetFlag(FLAGS_threads));
  kernels::cpu::SetOneDnnThreads(absl::GetFlag(FLAGS_threads));
  const Shape shapes[] = {
      {"square", 2048, 2048, 2048},
      {"expert up-projection (tokens x d -> ffn)", 2048, 256, 4096},
      {"expert down-projection (tokens x ffn -> d)", 2048, 4096, 256},
      {"attention projection", 512, 256, 512},
      {"small chunk", 128, 256, 512},
      // One thread's block products in attention (kernels/cpu/attention.cc)
      // at the example's head_dim: compare at --threads 1.
      {"attention scores block", 128, 32, 128},
      {"attention values block", 128, 128, 32},
      // Pieces of the example's qkv projection as the CPU backend cuts a
      // product (kernels/cpu/thread_pool.h PiecesOfProduct), each one call
      // on one thread: what a narrower piece costs. Compare at --threads 1.
      {"qkv piece of 1024 rows", 1024, 256, 768},
      {"qkv piece of 256 rows", 256, 256, 768},
      {"qkv piece of 128 rows", 128, 256, 768},
      {"qkv piece of 64 rows", 64, 256, 768},
  };
  std::mt19937 random(3);
  std::normal_distribution<float> normal;
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-44s %10s %10s %10s %12s  %s\n", "shape (M x K x N)", "sgemm",
              "dnnl f32", "dnnl bf16", "bf16/sgemm", "bf16 kernel");
  for (const Shape& shape : shapes) {
    const int64_t m = shape.m, k = shape.k, n = shape.n;
    std::vector<float> a(m * k), b(k * n), c(m * n);
    for (float& value : a) value = normal(random);
    for (float& value : b) value = normal(random);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    kernels::cpu::ConvertToBf16(a, absl::MakeSpan(a16));
    kernels::cpu::ConvertToBf16(b, absl::MakeSpan(b16));
    MatmulLayout f32_layout;
    f32_layout.input = MatmulInput::kFloat32;
    auto f32 = OneDnnMatmul::Create(f32_layout);
    auto bf16 = OneDnnMatmul::Create(MatmulLayout());
    if (!f32.ok() || !bf16.ok()) {
      std::fprintf(
          stderr, "%s\n",
          (f32.ok() ? bf16.status() : f32.status()).ToString().c_str());
      return 1;
    }
    const double sgemm_seconds = TimeCall([&] {
      kernels::cpu::Blas().sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m,
                                 n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                                 c.data(), n);
    });
    const double f32_seconds = TimeCall([&] {
      (*f32)->Run(m, k, n, a.data(), b.data(), c.data()).IgnoreError();
    });
    const double bf16_seconds = TimeCall([&] {
      (*bf16)->Run(m, k, n, a16.data(), b16.data(), c.data()).IgnoreError();
    });
    const double flops = 2.0 * m * k * n;
    const std::string name =
        absl::StrFormat("%s %dx%dx%d", shape.what, m, k, n);
    std::printf("%-44s %10.0f %10.0f %10.0f %11.2fx  %s\n", name.c_str(),
                flops / sgemm_seconds / 1e9, flops / f32_seconds / 1e9,
                flops / bf16_seconds / 1e9, sgemm_seconds / bf16_seconds,
                (*bf16)->implementation().c_str());
    results.push_back(
        {{"shape", name},
         {"sgemm_gflops", flops / sgemm_seconds / 1e9},
         {"onednn_f32_gflops", flops / f32_seconds / 1e9},
         {"onednn_bf16_gflops", flops / bf16_seconds / 1e9},
         {"bf16_speedup_over_sgemm", sgemm_seconds / bf16_seconds},
         {"bf16_kernel", (*bf16)->implementation()}});
  }
  std::printf("OpenBLAS core: %s\n", kernels::cpu::Blas().corename());
  bench::WriteJsonResults({{"shapes", results}});
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
