#include "tests/bench/bench_main.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/mutex_settings.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, json, "", "also write the results here, as JSON");

namespace plateau::bench {

void WriteJsonResults(const nlohmann::json& results) {
  const std::string path = absl::GetFlag(FLAGS_json);
  if (path.empty()) return;
  std::ofstream file(path);
  file << results.dump(2) << "\n";
  file.close();
  if (!file) {
    std::fprintf(stderr, "cannot write the results to %s\n", path.c_str());
    std::exit(1);
  }
}

double BestSecondsPerCall(const std::function<void()>& call, int rounds,
                          double min_seconds) {
  using Clock = std::chrono::steady_clock;
  call();
  double best = 1e30;
  for (int round = 0; round < rounds; ++round) {
    int64_t calls = 0;
    const auto start = Clock::now();
    double seconds = 0;
    do {
      call();
      ++calls;
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    } while (seconds < min_seconds);
    best = std::min(best, seconds / calls);
  }
  return best;
}

int BenchmarkMain(int argc, char** argv, int (*run)()) {
  absl::ParseCommandLine(argc, argv);
  // Detection records every lock in a global graph (common/mutex_settings.h):
  // a cost on every lock of every thread, which a benchmark would time along
  // with what it measures. Binaries turn it off; so do the benchmarks.
  DisableMutexDeadlockDetection();
  return run();
}

}  // namespace plateau::bench
