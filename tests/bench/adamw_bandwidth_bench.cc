// Fused AdamW bandwidth on 100M parameters (28 bytes of traffic per
// parameter: read p, g, m, v; write p, m, v) next to a STREAM triad
// (a = b + s * c, 12 bytes per element) measured in the same run with the
// same threads and static split. The ratio is what the fused update achieves
// of what this machine's memory can deliver.
//
// Usage: adamw_bandwidth_bench [--parameters N] [--threads N] [--json FILE]
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"

ABSL_FLAG(int64_t, parameters, 100'000'000, "elements per array");
ABSL_FLAG(int32_t, threads, 2, "threads");

namespace plateau {
namespace {

using Clock = std::chrono::steady_clock;

template <typename Body>
double BestSeconds(int repeats, Body body) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    body();
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

int Run() {
  const int64_t count = absl::GetFlag(FLAGS_parameters);
  const int threads = absl::GetFlag(FLAGS_threads);
  kernels::cpu::CpuOps ops(threads);
  kernels::cpu::ThreadPool pool(threads);
  // Touch every page first (from the threads that will use it).
  std::vector<float> p(count), g(count), m(count), v(count);
  ops.Fill(count, 0.5f, p.data());
  ops.Fill(count, 0.01f, g.data());
  ops.Fill(count, 0.0f, m.data());
  ops.Fill(count, 0.0f, v.data());

  // STREAM triad over three of the arrays.
  float* a = m.data();
  const float* b = p.data();
  const float* c = g.data();
  const double triad_seconds = BestSeconds(5, [&] {
    pool.ParallelFor(count, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
    });
  });
  const double triad_bytes_per_second = 12.0 * count / triad_seconds;

  ops.Fill(count, 0.0f, m.data());
  kernels::AdamWHyperparameters hyper;
  int64_t step = 0;
  const double adamw_seconds = BestSeconds(5, [&] {
    hyper.step = ++step;
    ops.AdamWUpdate(kernels::ComputeAdamWCoefficients(hyper), count, p.data(),
                    g.data(), m.data(), v.data());
  });
  const double adamw_bytes_per_second = 28.0 * count / adamw_seconds;

  std::printf("threads %d, %lld parameters\n", threads,
              static_cast<long long>(count));
  std::printf("STREAM triad: %.2f GB/s\n", triad_bytes_per_second / 1e9);
  std::printf("fused AdamW:  %.2f GB/s (%.1f ms per step)\n",
              adamw_bytes_per_second / 1e9, adamw_seconds * 1e3);
  std::printf("AdamW / triad: %.1f%%\n",
              100.0 * adamw_bytes_per_second / triad_bytes_per_second);
  bench::WriteJsonResults({{"threads", threads},
                           {"parameters", count},
                           {"triad_bytes_per_second", triad_bytes_per_second},
                           {"adamw_bytes_per_second", adamw_bytes_per_second},
                           {"adamw_fraction_of_triad",
                            adamw_bytes_per_second / triad_bytes_per_second}});
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
