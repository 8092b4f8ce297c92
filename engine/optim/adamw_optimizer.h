// AdamW (kernels/adamw.h: PyTorch's AdamW) over the parameters of the owned
// ranges of the model's flat buffers: all of them on one rank, a ZeRO-1
// shard with data parallelism. Weight decay applies to every parameter
// except the RMSNorm scales; consecutive parameters with the same decay share
// one fused pass; padding between regions is skipped.
//
// Where the state lives (AdamWSettings::offload):
//   none:   the moments in device memory (component `optimizer`), updated
//           there by the backend's kernel;
//   serial: OffloadStreamAdamW's baseline. Master weights (host, `weights`)
//           and moments (host, `optimizer`) in the host pool; each step
//           copies every owned gradient to host staging, updates them all on
//           the host threads, then copies every weight back;
//   stream: OffloadStreamAdamW. The same state, the step a pipeline over
//           buckets of bucket_elements: bucket i+1's gradients copy down and
//           bucket i-1's weights copy up while bucket i updates. Staging:
//           two buckets.
// All three compute bitwise the same weights and moments. With bf16 weight
// storage (the model's product weights in bf16 on the device) the
// optimizer must be offloaded: its masters are then the only float32
// weights, and the product weights go back to the device rounded.
#ifndef PLATEAU_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_
#define PLATEAU_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/copy_engine.h"
#include "engine/memory/tensor.h"
#include "engine/model/parameter_layout.h"
#include "engine/model/split_buffers.h"
#include "engine/optim/gradient_copies.h"
#include "engine/optim/master_copies.h"
#include "engine/optim/optimizer.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "proto/job.pb.h"

namespace plateau::engine {

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
  OptimizerOffload offload = OptimizerOffload::kNone;
  // With offload: the stream's bucket, and the host threads that update.
  int64_t bucket_elements = kOffloadBucketElements;
  int host_threads = 1;
};

class AdamWOptimizer final : public Optimizer {
 public:
  // Allocates zeroed moments (and with offload the master weights, copied
  // from `weights`, widened where they are bf16; with offload, bf16
  // gradients are widened on their way to the host, GradientCopies).
  // weights and gradients: laid out by `layout`, which must outlive the
  // optimizer, as must the buffers. Empty `owned`: every parameter.
  // INVALID_ARGUMENT for bf16 weight storage without offload (and so for bf16
  // gradients).
  static absl::StatusOr<std::unique_ptr<AdamWOptimizer>> Create(
      const AdamWSettings& settings, const ParameterLayout* layout,
      std::vector<OwnedRange> owned, const SplitBuffers& weights,
      const SplitBuffers& gradients, kernels::Ops* ops,
      AccountedAllocator* allocator);

  absl::Status Step(float learning_rate, int64_t step) override;
  std::vector<TensorPiece> MasterPieces() override;
  std::vector<TensorPiece> StatePieces() override;
  std::map<std::string, int64_t> StateBytesByTier() const override;

 private:
  AdamWOptimizer(const AdamWSettings& settings, const ParameterLayout* layout,
                 const SplitBuffers& weights, const SplitBuffers& gradients,
                 kernels::Ops* ops);

  // Part of one parameter inside an owned range; also a run of them that
  // one fused pass updates (parameter: its first).
  struct Segment {
    const ParameterInfo* parameter = nullptr;
    int64_t offset = 0;        // in the flat buffers
    int64_t state_offset = 0;  // in the moments
    int64_t elements = 0;
    bool decay = false;
  };

  // Gradient staging buffers of the stream: one bucket copies down while
  // the other updates.
  static constexpr int kStagingSlots = kAdamWStagingSlots;

  // The runs of segments contiguous in the buffers and the state with the
  // same decay, each cut at most_elements.
  std::vector<Segment> Runs(int64_t most_elements) const;
  // Host staging: every owned element (serial), kStagingSlots buckets
  // (stream).
  int64_t StagingElements() const;
  // The host update of `run`, its gradients at `gradients`, on host_ops_.
  void UpdateOnHost(const kernels::AdamWCoefficients& coefficients,
                    const Segment& run, const float* gradients);
  void StepSerial(const kernels::AdamWCoefficients& with_decay,
                  const kernels::AdamWCoefficients& without_decay);
  void StepStream(const kernels::AdamWCoefficients& with_decay,
                  const kernels::AdamWCoefficients& without_decay);
  // With offload: the master weights from the model's weights.
  void CopyMastersFromWeights();

  AdamWSettings settings_;
  const ParameterLayout* layout_;
  SplitBuffers weights_;
  SplitBuffers gradients_;
  kernels::Ops* ops_;
  AccountedAllocator* allocator_ = nullptr;
  std::vector<Segment> segments_;
  int64_t state_elements_ = 0;
  Tensor first_moment_;   // (owned elements)  optimizer
  Tensor second_moment_;  // (owned elements)  optimizer
  // With offload: the owned weights' master copy, the gradients' staging
  // (host), the host threads, and the copies of the two directions.
  Tensor master_weights_;  // (owned elements)  weights
  Tensor staging_;         // (StagingElements())  staging
  std::unique_ptr<kernels::cpu::CpuOps> host_ops_;
  std::unique_ptr<GradientCopies> gradients_down_;
  std::unique_ptr<MasterCopies> weights_up_;
};

// The whole model's AdamW state, as StatePieces names it.
TensorShapes AdamWStateShapes(const ModelConfig& config);

// The tier of a parameter role: "dense", "expert" or "router".
const char* OptimizerTierOf(ParameterRole role);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_ADAMW_OPTIMIZER_H_
