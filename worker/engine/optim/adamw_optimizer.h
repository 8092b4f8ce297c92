// AdamW over the model's flat parameter buffer (kernels/adamw.h: PyTorch's
// AdamW). Moments live in device memory under component `optimizer`, laid
// out like the parameters. Weight decay applies to every parameter except
// the RMSNorm scales. Consecutive parameters with the same decay share one
// fused pass.
#ifndef PLATEAU_WORKER_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_
#define PLATEAU_WORKER_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_

#include <memory>

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
  // Allocates zeroed moments. weights and gradients: flat (P) buffers laid
  // out by `layout`, which must outlive the optimizer.
  static absl::StatusOr<std::unique_ptr<AdamWOptimizer>> Create(
      const AdamWSettings& settings, const ParameterLayout* layout,
      Tensor* weights, Tensor* gradients, kernels::Ops* ops,
      AccountedAllocator* allocator);

  void Step(float learning_rate, int64_t step) override;
  std::vector<OptimizerStateTensor> StateTensors() override;
  std::map<std::string, int64_t> StateBytesByTier() const override;

 private:
  AdamWOptimizer(const AdamWSettings& settings, const ParameterLayout* layout,
                 Tensor* weights, Tensor* gradients, kernels::Ops* ops);

  // A run of consecutive parameters updated in one pass.
  struct Segment {
    int64_t offset = 0;
    int64_t elements = 0;
    bool decay = false;
  };

  AdamWSettings settings_;
  const ParameterLayout* layout_;
  Tensor* weights_;
  Tensor* gradients_;
  kernels::Ops* ops_;
  std::vector<Segment> segments_;
  Tensor first_moment_;   // (P)  optimizer
  Tensor second_moment_;  // (P)  optimizer
};

// The tier of a parameter role: "dense", "expert" or "router".
const char* OptimizerTierOf(ParameterRole role);

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_
