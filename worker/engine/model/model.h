// The MoE transformer of DESIGN.md section 8, with an explicit forward and
// backward per stage (no autograd tape): embedding -> layers -> output head.
// Parameters and gradients each live in one flat device buffer laid out by
// ParameterLayout. With activation checkpointing, forward keeps only each
// layer's input (component `checkpoint`) and backward recomputes the layer
// before differentiating it; without it, every layer's activations are kept.
// Both give bitwise the same loss and gradients.
#ifndef PLATEAU_WORKER_ENGINE_MODEL_MODEL_H_
#define PLATEAU_WORKER_ENGINE_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "worker/engine/memory/tensor.h"
#include "worker/engine/model/model_config.h"
#include "worker/engine/model/parameter_layout.h"

namespace plateau::engine {

struct StepLoss {
  double cross_entropy = 0.0;   // mean over the batch's tokens
  double load_balancing = 0.0;  // summed over layers
  double total() const { return cross_entropy + load_balancing; }
};

class Model {
 public:
  // Allocates weights and gradients (device pool); weights uninitialised.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelConfig& config, kernels::Ops* ops,
      AccountedAllocator* allocator);

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  kernels::Ops& ops() { return *ops_; }
  Tensor& weights() { return weights_; }
  Tensor& gradients() { return gradients_; }

  // Normal(0, std) per ParameterLayout, ones for norms; a function of
  // (seed, parameter index) only.
  void InitializeWeights(uint64_t seed);
  void ZeroGradients();

  // tokens: host, (sequences, seq_len + 1); inputs are each row's first
  // seq_len tokens, targets its last seq_len. Adds the gradient of
  // loss.total() to gradients().
  absl::StatusOr<StepLoss> ForwardBackward(const int32_t* tokens,
                                           int64_t sequences);

  // Mean cross-entropy (no load-balancing term) of the same layout of
  // tokens, without gradients.
  absl::StatusOr<double> Evaluate(const int32_t* tokens, int64_t sequences);

  // Token copies routed to each expert in the last ForwardBackward or
  // Evaluate: [layer][expert].
  const std::vector<std::vector<int64_t>>& expert_tokens() const {
    return expert_tokens_;
  }

 private:
  Model(const ModelConfig& config, kernels::Ops* ops,
        AccountedAllocator* allocator);

  struct Batch;
  absl::StatusOr<Batch> LoadBatch(const int32_t* tokens,
                                  int64_t sequences) const;

  ModelConfig config_;
  ParameterLayout layout_;
  kernels::Ops* ops_;
  AccountedAllocator* allocator_;
  Tensor weights_;    // (P)  weights
  Tensor gradients_;  // (P)  gradients
  std::vector<std::vector<int64_t>> expert_tokens_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_MODEL_MODEL_H_
