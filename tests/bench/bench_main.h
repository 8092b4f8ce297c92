// The tail every benchmark shares: the --json flag, writing the results
// there, and main. Each benchmark then states only its own flags and
// measurements.
#ifndef PLATEAU_TESTS_BENCH_BENCH_MAIN_H_
#define PLATEAU_TESTS_BENCH_BENCH_MAIN_H_

#include <functional>
#include <string>

#include "absl/flags/declare.h"
#include "nlohmann/json_fwd.hpp"

// At global scope, as absl requires of flags (it blocks them in namespaces).
ABSL_DECLARE_FLAG(std::string, json);

namespace plateau::bench {

// Writes `results` to --json, when it is set. Exits with status 1 when the
// file cannot be written: a benchmark has no caller to hand a Status to, and
// results that silently went nowhere would read as an empty run.
void WriteJsonResults(const nlohmann::json& results);

// Seconds one call of `call` takes: after one warm-up call, `rounds` rounds,
// each repeating the call for at least `min_seconds`; the best round's mean.
double BestSecondsPerCall(const std::function<void()>& call, int rounds,
                          double min_seconds);

// The whole of a benchmark's main: parses the command line, turns off absl's
// Mutex deadlock detection, and returns run().
int BenchmarkMain(int argc, char** argv, int (*run)());

}  // namespace plateau::bench

#endif  // PLATEAU_TESTS_BENCH_BENCH_MAIN_H_
