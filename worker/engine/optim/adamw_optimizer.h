// AdamW (kernels/adamw.h: PyTorch's AdamW) over the parameters of the owned
// ranges of the model's flat buffers: all of them on one rank, a ZeRO-1
// shard with data parallelism. Moments live in device memory under
// component `optimizer`, one per owned element. Weight decay applies to
// every parameter except the RMSNorm scales; consecutive parameters with the
// same decay share one fused pass; padding between regions is skipped.
#ifndef PLATEAU_WORKER_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_
#define PLATEAU_WORKER_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "worker/engine/memory/tensor.h"
#include "worker/engine/model/parameter_layout.h"
#include "worker/engine/optim/optimizer.h"

namespace plateau::engine {

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamWOptimizer final : public Optimizer {
 public:
  // Allocates zeroed moments. weights and gradients: flat buffers laid out
  // by `layout`, which must outlive the optimizer. Empty `owned`: every
  // parameter.
  static absl::StatusOr<std::unique_ptr<AdamWOptimizer>> Create(
      const AdamWSettings& settings, const ParameterLayout* layout,
      std::vector<OwnedRange> owned, Tensor* weights, Tensor* gradients,
      kernels::Ops* ops, AccountedAllocator* allocator);

  void Step(float learning_rate, int64_t step) override;
  std::vector<TensorPiece> StatePieces() override;
  std::map<std::string, int64_t> StateBytesByTier() const override;

 private:
  AdamWOptimizer(const AdamWSettings& settings, const ParameterLayout* layout,
                 Tensor* weights, Tensor* gradients, kernels::Ops* ops);

  // Part of one parameter inside an owned range.
  struct Segment {
    const ParameterInfo* parameter = nullptr;
    int64_t offset = 0;        // in the flat buffers
    int64_t state_offset = 0;  // in the moments
    int64_t elements = 0;
    bool decay = false;
  };

  AdamWSettings settings_;
  const ParameterLayout* layout_;
  Tensor* weights_;
  Tensor* gradients_;
  kernels::Ops* ops_;
  std::vector<Segment> segments_;
  Tensor first_moment_;   // (owned elements)  optimizer
  Tensor second_moment_;  // (owned elements)  optimizer
};

// The whole model's AdamW state, as StatePieces names it.
TensorShapes AdamWStateShapes(const ModelConfig& config);

// The tier of a parameter role: "dense", "expert" or "router".
const char* OptimizerTierOf(ParameterRole role);

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_
