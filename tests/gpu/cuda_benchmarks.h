// The CUDA backend's benchmarks (tests/gpu/run.sh), each a ratio against a
// baseline measured in the same run, on the same device:
//   grouped_gemm      the experts' grouped product (CudaOps::GroupedGemm,
//                     uneven experts) against one dense product of the same
//                     FLOPs: TFLOP/s, tf32; grouped_gemm_bf16 the same on
//                     bf16 operands;
//   vocab_projection  the output head's forward and backward by vocabulary
//                     blocks (Ring-DTP's single-rank form: a block of logits
//                     at a time, CrossEntropyFoldBlock) against the unfused
//                     form (all logits, CrossEntropyForward): seconds and
//                     logits bytes;
//   adamw             the fused AdamW update against a device-to-device copy:
//                     GB/s of memory traffic;
//   training          a 1B-parameter MoE training step (AdamW, float32
//                     storage, tf32 products): model FLOP/s against the
//                     dense product, tokens/s and the device peaks by
//                     component; training_bf16 the same step under bf16
//                     mixed precision, against the bf16 dense product, with
//                     its tokens/s against training's.
// `smoke` shrinks every size so that the same code runs in seconds on the
// CPU emulation (cuda_benchmarks_test).
#ifndef PLATEAU_TESTS_GPU_CUDA_BENCHMARKS_H_
#define PLATEAU_TESTS_GPU_CUDA_BENCHMARKS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace plateau::gpu {

struct BenchmarkResult {
  std::string name;
  std::string unit;
  double value = 0.0;
  std::string baseline;  // what it is measured against
  double baseline_value = 0.0;
  std::string detail;  // sizes, memory
  double ratio() const {
    return baseline_value > 0 ? value / baseline_value : 0.0;
  }
};

struct BenchmarkOptions {
  bool smoke = false;
  int repeats = 10;        // timed repeats of each kernel benchmark
  int training_steps = 3;  // timed, after two warm-up steps
};

// Every benchmark, in the order above; the first error ends them.
absl::StatusOr<std::vector<BenchmarkResult>> RunCudaBenchmarks(
    const BenchmarkOptions& options);

// "name  value unit  vs  baseline value  ratio  detail", one line each.
std::string FormatResults(const std::vector<BenchmarkResult>& results);

}  // namespace plateau::gpu

#endif  // PLATEAU_TESTS_GPU_CUDA_BENCHMARKS_H_
