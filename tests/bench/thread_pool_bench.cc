// What handing a loop to the CPU backend's thread pool costs
// (kernels/cpu/thread_pool.h): the time of one call of an empty
// ParallelFor over --threads threads, and of a 65,536-element bf16
// conversion (a Ring-DTP logits piece, kernels/cpu/bf16.h) through the
// pool against on the calling thread alone. Calls follow each other
// without a gap, as a step's short loops do. Each figure is the best of
// --rounds rounds, each at least --min_seconds of repeats.
//
// Usage: thread_pool_bench [--threads T] [--rounds R] [--min_seconds S]
//   [--json FILE]
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/types/span.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"

ABSL_FLAG(int32_t, threads, 2, "threads of the pool");
ABSL_FLAG(int32_t, rounds, 3, "timed rounds per figure; the best is kept");
ABSL_FLAG(double, min_seconds, 0.3, "each round repeats for at least this");

namespace plateau {
namespace {

// Microseconds per call (bench::BestSecondsPerCall, warmed first: the team
// started, pages touched).
double TimeCall(const std::function<void()>& call) {
  return bench::BestSecondsPerCall(call, absl::GetFlag(FLAGS_rounds),
                                   absl::GetFlag(FLAGS_min_seconds)) *
         1e6;
}

int Run() {
  constexpr int64_t kElements = 65536;
  constexpr int64_t kGrain = 4096;  // the elementwise ops' grain
  kernels::cpu::ThreadPool pool(absl::GetFlag(FLAGS_threads));
  std::vector<float> values(kElements, 1.5f);
  std::vector<uint16_t> rounded(kElements);
  const auto convert = [&](int64_t begin, int64_t end) {
    kernels::cpu::ConvertToBf16(
        absl::MakeConstSpan(values.data() + begin, end - begin),
        absl::MakeSpan(rounded.data() + begin, end - begin));
  };
  const double empty_us = TimeCall(
      [&] { pool.ParallelFor(pool.threads(), 1, [](int64_t, int64_t) {}); });
  const double pooled_us =
      TimeCall([&] { pool.ParallelFor(kElements, kGrain, convert); });
  const double serial_us = TimeCall([&] { convert(0, kElements); });
  std::printf("threads %d, spin %d us before a waiting thread sleeps\n",
              pool.threads(), kernels::cpu::ThreadPool::kSpinMicroseconds);
  std::printf("%-44s %10s\n", "call", "us/call");
  std::printf("%-44s %10.2f\n", "empty ParallelFor", empty_us);
  std::printf("%-44s %10.2f\n", "bf16 conversion of 65,536 through the pool",
              pooled_us);
  std::printf("%-44s %10.2f\n", "bf16 conversion of 65,536 on one thread",
              serial_us);
  bench::WriteJsonResults({{"threads", pool.threads()},
                           {"empty_parallel_for_us", empty_us},
                           {"pooled_conversion_us", pooled_us},
                           {"serial_conversion_us", serial_us}});
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
