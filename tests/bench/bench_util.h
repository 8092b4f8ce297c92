// What the benchmarks share: ending on an unexpected error (a benchmark has
// no one to hand a Status to), and the example model's shape.
#ifndef PLATEAU_TESTS_BENCH_BENCH_UTIL_H_
#define PLATEAU_TESTS_BENCH_BENCH_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/model/model_config.h"

namespace plateau::bench {

// Prints the error and exits with status 1 unless `status` is OK.
inline void ExitIfError(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T OrExit(absl::StatusOr<T> value) {
  ExitIfError(value.status());
  return std::move(value).value();
}

// deploy/examples/tiny-moe.yaml's model, schedules off.
inline engine::ModelConfig ExampleModelConfig() {
  engine::ModelConfig config;
  config.layers = 4;
  config.d_model = 256;
  config.heads = 8;
  config.experts = 8;
  config.top_k = 2;
  config.ffn_hidden = 512;
  config.vocab = 4096;
  config.seq_len = 256;
  return config;
}

}  // namespace plateau::bench

#endif  // PLATEAU_TESTS_BENCH_BENCH_UTIL_H_
