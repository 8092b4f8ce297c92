// The MoE transformer of docs/ARCHITECTURE.md section 8, with an explicit
// forward and backward per stage (no autograd tape): embedding -> layers ->
// output head. A Model holds one rank's shard (its pipeline stage's layers, its
// share of the experts); parameters and gradients each live in one flat device
// buffer laid out by ParameterLayout (or, in bf16 storage, two: SplitBuffers).
//
// Under bf16 products each pass over a layer (or the head) first rounds its
// product weights into a bf16 copy that the pass's products read
// (LayerWeightsForPass); the float32 weights are the only lasting copy.
// With bf16 weight storage (ModelConfig::bf16_weight_storage) the product
// weights and the embedding are kept in bf16 only, which the passes read as
// they are.
//
// Work comes in micro-batches: Forward(id, ...) runs one through the shard
// and keeps what its Backward(id, ...) needs; several may be in flight (the
// pipeline's 1F1B schedule). What forward keeps for backward is the
// model's ActivationPolicy (activation_policy.h: keep, recompute, or
// recompute with the inputs offloaded, SCO); its dispatch and head are its
// DispatchStrategy and HeadStrategy. All three are chosen once, from the
// config, when the model is created.
#ifndef PLATEAU_ENGINE_MODEL_MODEL_H_
#define PLATEAU_ENGINE_MODEL_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/copy_engine.h"
#include "engine/memory/tensor.h"
#include "engine/model/activation_policy.h"
#include "engine/model/gradient_window.h"
#include "engine/model/head_strategy.h"
#include "engine/model/layer_context.h"
#include "engine/model/model_config.h"
#include "engine/model/parameter_layout.h"
#include "engine/model/router.h"
#include "engine/model/split_buffers.h"
#include "engine/model/transformer_layer.h"
#include "kernels/ops.h"

namespace plateau::engine {

struct StepLoss {
  double cross_entropy = 0.0;   // mean over the tokens
  double load_balancing = 0.0;  // summed over layers
  double z_loss = 0.0;          // summed over layers
  double total() const { return cross_entropy + load_balancing + z_loss; }
};

// What one micro-batch's forward through a shard produced.
struct StageOutput {
  Tensor activations;  // (N, D): the next stage's input; empty on the last
  double cross_entropy = 0.0;  // the micro-batch's mean (last stage only)
  RouterLosses router;         // summed over this shard's layers
};

class Model {
 public:
  // Allocates weights and gradients (device pool); weights uninitialised.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelConfig& config, const ModelShard& shard, kernels::Ops* ops,
      AccountedAllocator* allocator, ModelGroups groups = {});
  // The whole model on one rank.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelConfig& config, kernels::Ops* ops,
      AccountedAllocator* allocator);
  // The whole model on one rank, for EvaluateStage only: no gradients are
  // allocated, and Forward is FAILED_PRECONDITION.
  static absl::StatusOr<std::unique_ptr<Model>> CreateForEvaluation(
      const ModelConfig& config, kernels::Ops* ops,
      AccountedAllocator* allocator);

  ~Model();

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  kernels::Ops& ops() { return *ops_; }
  AccountedAllocator& allocator() { return *allocator_; }
  // The float32 weights: the whole flat buffer, or with bf16 weight storage
  // [0, layout().bf16_begin()) of it (weight_buffers() has the rest).
  Tensor& weights() { return weights_; }
  SplitBuffers weight_buffers() {
    return {&weights_, &bf16_weights_, weights_.elements()};
  }
  // The float32 gradients: the whole flat buffer, or with bf16 gradient
  // accumulation [0, layout().bf16_begin()) of it (gradient_buffers()
  // has the rest).
  Tensor& gradients() { return gradients_; }
  SplitBuffers gradient_buffers() {
    return {&gradients_, &bf16_gradients_, gradients_.elements()};
  }
  // With tied embeddings on a last pipeline stage (which has no embedding):
  // its copy of the head rows of the first stage's embed.weight, and their
  // gradient, outside the flat buffers (ParameterLayout::
  // tied_head_copy_elements). No parameter: the optimizer, clipping and
  // checkpoints see the first stage's table only, and the training step
  // keeps the two in step (tied_head.h). Empty otherwise.
  Tensor& tied_head_weights() { return tied_head_weights_; }
  Tensor& tied_head_gradients() { return tied_head_gradients_; }

  // InitialWeights of every parameter of the shard (rounded where stored in
  // bf16). Host staging (a few MiB, component `staging`) is freed before it
  // returns.
  absl::Status InitializeWeights(uint64_t seed);
  void ZeroGradients();

  // ---- One micro-batch through this shard ----
  // tokens: host, (sequences, seq_len + 1); inputs are each row's first
  // seq_len tokens, targets its last seq_len (every stage gets them: the
  // first embeds the inputs, the last scores the targets). `input` is the
  // previous stage's output; empty on the first stage.
  absl::StatusOr<StageOutput> Forward(int64_t id, const int32_t* tokens,
                                      int64_t sequences, Tensor input,
                                      const LossWeights& weights);
  // Adds micro-batch `id`'s gradient to gradient_buffers() (with bf16
  // gradients through a float32 window a pass, GradientWindow) and returns
  // the gradient of its input (a ResidualGradientBuffer; empty on the first
  // stage). output_gradient is the next stage's (empty on the last stage).
  absl::StatusOr<Tensor> Backward(int64_t id, Tensor output_gradient);

  // Forward and backward of one batch through a shard that is the whole
  // pipeline (the first and last stage), with the given loss weights
  // (default: the mean over this batch's tokens).
  absl::StatusOr<StepLoss> ForwardBackward(const int32_t* tokens,
                                           int64_t sequences);
  absl::StatusOr<StepLoss> ForwardBackward(const int32_t* tokens,
                                           int64_t sequences,
                                           const LossWeights& weights);

  // Forward only, keeping nothing: the next stage's input, or on the last
  // stage the mean cross-entropy (no load-balancing term).
  absl::StatusOr<StageOutput> EvaluateStage(const int32_t* tokens,
                                            int64_t sequences, Tensor input);

  // The weights of a pass over shard layer `layer`, or over the head. Under
  // bf16 products their product weights also carry a bf16 copy that the
  // pass's products read, rounded (to nearest even) now into *copy
  // (LayerWeightsCopyBuffer, HeadWeightsCopyBuffer), which the caller keeps
  // until the pass ends; *copy stays empty under fp32, and with bf16 weight
  // storage, whose stored weights the products read. One
  // copy serves every product of the pass (a forward, or a backward with its
  // recompute) and every chunk of a PipelinedLLEP dispatch, instead of each
  // product rounding the weights again; products take the rounded values either
  // way, so the loss and gradients are bitwise the same.
  absl::StatusOr<LayerParameters<const float>> LayerWeightsForPass(
      int64_t layer, Tensor* copy) const;
  absl::StatusOr<OutputHeadParameters<const float>> HeadWeightsForPass(
      Tensor* copy) const;

  // Token copies routed to each expert (over the batch group) in the last
  // forward: [shard layer][expert].
  const std::vector<std::vector<int64_t>>& expert_tokens() const {
    return expert_tokens_;
  }

  // Aux-loss-free balancing (ModelConfig::expert_bias), once a step after
  // the optimizer's: each shard layer's expert bias rises by the update
  // rate for each expert whose load (the step's token copies over the
  // batch group, [shard layer][expert]) is below the mean and falls by it
  // for each above. Every rank of the batch group has the same loads, so
  // the biases stay replicated. A no-op without the option.
  void UpdateExpertBias(const std::vector<std::vector<int64_t>>& expert_tokens);

 private:
  Model(const ModelConfig& config, const ModelShard& shard, kernels::Ops* ops,
        AccountedAllocator* allocator, ModelGroups groups,
        ActivationPolicy policy);
  static absl::StatusOr<std::unique_ptr<Model>> CreateWith(
      const ModelConfig& config, const ModelShard& shard, kernels::Ops* ops,
      AccountedAllocator* allocator, ModelGroups groups, bool with_gradients);

  struct MicroBatch;
  absl::StatusOr<std::unique_ptr<MicroBatch>> LoadMicroBatch(
      const int32_t* tokens, int64_t sequences,
      const LossWeights& weights) const;
  // boundary[0]: the embedded tokens (in an `embedded` buffer) on the first
  // stage, else `input`, the previous stage's output.
  absl::Status SetStageInput(MicroBatch& batch, Tensor input,
                             const BufferSpec& embedded);
  // Runs this shard's layers forward from boundary[0], keeping what
  // backward needs when for_backward (else only the last boundary); returns
  // their load-balancing loss.
  absl::StatusOr<RouterLosses> LayersForward(MicroBatch& batch,
                                             bool for_backward);
  // SCO: starts copying boundary[layer] to a new host tensor, and back to a
  // new device tensor.
  absl::Status OffloadBoundary(MicroBatch& batch, int64_t layer);
  absl::Status FetchBoundary(MicroBatch& batch, int64_t layer);
  // The head's parameters and their gradients: in the flat buffers, or the
  // lm_head rows in the tied copy; the weights as stored, without a
  // per-pass bf16 copy.
  OutputHeadParameters<const float> HeadWeights() const;
  // The weight at flat offset `offset` as stored: float32, or bf16 past
  // the float32 buffer (SplitBuffers).
  LinearOperand StoredOperand(int64_t offset) const;
  // The head's gradients: lm_head's rows in `window` when not null.
  OutputHeadParameters<float> HeadGradients(GradientWindow* window);
  // INTERNAL unless shard layer `layer`'s product weights lie as the pass
  // copies and gradient windows take them: wq, wk, wv, wo and the shared
  // experts' w1, w3, w2 one range, the routed experts' w1, w3, w2 another.
  absl::Status CheckProductWeightsAdjacent(int64_t layer) const;
  // With bf16 gradient accumulation, the window a backward pass over shard
  // layer `layer` (or the head) accumulates its product weights' gradients
  // in; nullopt without.
  absl::StatusOr<std::optional<GradientWindow>> OpenLayerGradients(
      int64_t layer);
  absl::StatusOr<std::optional<GradientWindow>> OpenHeadGradients();
  // The head's forward of the micro-batch from the last layer's output x,
  // with the pass's copy of the lm_head rows.
  absl::StatusOr<double> HeadForward(const MicroBatch& batch, const Tensor& x,
                                     OutputHeadActivations* saved) const;

  ModelConfig config_;
  ParameterLayout layout_;
  kernels::Ops* ops_;
  AccountedAllocator* allocator_;
  ModelGroups groups_;
  const ActivationPolicy policy_;
  const DispatchStrategy* const dispatch_;
  const HeadStrategy* const head_;
  Tensor weights_;         // (P or bf16_begin)  weights
  Tensor bf16_weights_;    // (P - bf16_begin)  weights, bf16; or empty
  Tensor gradients_;       // (P or bf16_begin)  gradients; empty for eval
  Tensor bf16_gradients_;  // (P - bf16_begin)  gradients, bf16; or empty
  Tensor tied_head_weights_;
  Tensor tied_head_gradients_;
  // SCO's copies; declared before in_flight_, whose micro-batches wait for
  // their copies when destroyed.
  std::unique_ptr<CopyEngine> checkpoint_copies_;
  std::map<int64_t, std::unique_ptr<MicroBatch>> in_flight_;
  std::vector<std::vector<int64_t>> expert_tokens_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_MODEL_H_
