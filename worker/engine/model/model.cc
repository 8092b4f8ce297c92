#include "worker/engine/model/model.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "worker/engine/model/layer_context.h"
#include "worker/engine/model/output_head.h"
#include "worker/engine/model/transformer_layer.h"

namespace plateau::engine {
namespace {

// SplitMix64's increment: SplitMix64(seed + k * kGamma) is the (k + 1)-th
// output of the sequential splitmix64 generator seeded with `seed`.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

// Box-Muller on SplitMix64: specified here rather than by the standard
// library, so initial weights are the same with any toolchain. Values i and
// i + 1 take their bits from counters i and i + 1 of `stream`.
void FillNormal(uint64_t stream, float std, std::vector<float>& values) {
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < values.size(); i += 2) {
    const uint64_t bits1 = SplitMix64(stream + i * kGamma);
    const uint64_t bits2 = SplitMix64(stream + (i + 1) * kGamma);
    const double u1 =
        (static_cast<double>(bits1 >> 11) + 1.0) * 0x1.0p-53;        // (0, 1]
    const double u2 = static_cast<double>(bits2 >> 11) * 0x1.0p-53;  // [0, 1)
    const double radius = std::sqrt(-2.0 * std::log(u1));
    values[i] = static_cast<float>(std * radius * std::cos(kTwoPi * u2));
    if (i + 1 < values.size()) {
      values[i + 1] = static_cast<float>(std * radius * std::sin(kTwoPi * u2));
    }
  }
}

}  // namespace

struct Model::Batch {
  LayerContext context;
  Tensor input_ids;   // (N)  activations, int32
  Tensor target_ids;  // (N)  activations, int32
};

Model::Model(const ModelConfig& config, kernels::Ops* ops,
             AccountedAllocator* allocator)
    : config_(config), layout_(config), ops_(ops), allocator_(allocator) {}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelConfig& config, kernels::Ops* ops,
    AccountedAllocator* allocator) {
  std::unique_ptr<Model> model(new Model(config, ops, allocator));
  const int64_t parameters = model->layout_.total_elements();
  ASSIGN_OR_RETURN(model->weights_,
                   Tensor::Create(*allocator, MemoryPool::kDevice,
                                  MemoryComponent::kWeights, {parameters}));
  ASSIGN_OR_RETURN(model->gradients_,
                   Tensor::Create(*allocator, MemoryPool::kDevice,
                                  MemoryComponent::kGradients, {parameters}));
  model->ZeroGradients();
  return model;
}

void Model::InitializeWeights(uint64_t seed) {
  std::vector<float> values;
  const std::vector<ParameterInfo>& parameters = layout_.parameters();
  for (size_t index = 0; index < parameters.size(); ++index) {
    const ParameterInfo& info = parameters[index];
    values.assign(info.elements, 1.0f);
    if (info.init_std > 0.0f) {
      // One stream per parameter: its values depend on (seed, index) only.
      FillNormal(SplitMix64(seed * kGamma + index), info.init_std, values);
    }
    ops_->CopyFromHost(info.elements * static_cast<int64_t>(sizeof(float)),
                       values.data(), weights_.f32() + info.offset);
  }
}

void Model::ZeroGradients() {
  ops_->Fill(gradients_.elements(), 0.0f, gradients_.f32());
}

absl::StatusOr<Model::Batch> Model::LoadBatch(const int32_t* tokens,
                                              int64_t sequences) const {
  Batch batch;
  batch.context.config = &config_;
  batch.context.ops = ops_;
  batch.context.allocator = allocator_;
  batch.context.sequences = sequences;
  const int64_t n = batch.context.tokens();
  const int64_t seq_len = config_.seq_len;
  std::vector<int32_t> inputs(n), targets(n);
  for (int64_t s = 0; s < sequences; ++s) {
    const int32_t* row = tokens + s * (seq_len + 1);
    for (int64_t t = 0; t < seq_len; ++t) {
      inputs[s * seq_len + t] = row[t];
      targets[s * seq_len + t] = row[t + 1];
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (inputs[i] < 0 || inputs[i] >= config_.vocab || targets[i] < 0 ||
        targets[i] >= config_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id out of range [0, ", config_.vocab, ") in the batch"));
    }
  }
  ASSIGN_OR_RETURN(batch.input_ids,
                   batch.context.Allocate(MemoryComponent::kActivations, {n},
                                          DType::kInt32));
  ASSIGN_OR_RETURN(batch.target_ids,
                   batch.context.Allocate(MemoryComponent::kActivations, {n},
                                          DType::kInt32));
  ops_->CopyFromHost(n * 4, inputs.data(), batch.input_ids.i32());
  ops_->CopyFromHost(n * 4, targets.data(), batch.target_ids.i32());
  return batch;
}

absl::StatusOr<StepLoss> Model::ForwardBackward(const int32_t* tokens,
                                                int64_t sequences) {
  ASSIGN_OR_RETURN(Batch batch, LoadBatch(tokens, sequences));
  const LayerContext& context = batch.context;
  const int64_t n = context.tokens();
  const int64_t d = config_.d_model;
  const float* w = weights_.f32();
  float* g = gradients_.f32();
  const OutputHeadParameters<const float> head_w =
      OutputHeadParametersAt<const float>(layout_, w);
  const OutputHeadParameters<float> head_g =
      OutputHeadParametersAt<float>(layout_, g);
  StepLoss loss;
  expert_tokens_.assign(config_.layers, {});

  // ---- Forward. boundary[l] is layer l's input; boundary[L] feeds the head.
  std::vector<Tensor> boundary(config_.layers + 1);
  ASSIGN_OR_RETURN(boundary[0],
                   context.Allocate(MemoryComponent::kCheckpoint, {n, d}));
  ops_->EmbeddingForward(n, d, batch.input_ids.i32(),
                         w + layout_.embedding_offset(), boundary[0].f32());
  std::vector<LayerActivations> kept(
      config_.activation_checkpointing ? 0 : config_.layers);
  for (int64_t l = 0; l < config_.layers; ++l) {
    ASSIGN_OR_RETURN(boundary[l + 1],
                     context.Allocate(MemoryComponent::kCheckpoint, {n, d}));
    LayerActivations transient;
    LayerActivations& saved =
        config_.activation_checkpointing ? transient : kept[l];
    ASSIGN_OR_RETURN(const double aux,
                     TransformerLayerForward(
                         context, LayerParametersAt<const float>(layout_, l, w),
                         boundary[l].f32(), boundary[l + 1].f32(), &saved));
    loss.load_balancing += aux;
    expert_tokens_[l] = saved.moe.balance.tokens_per_expert;
  }
  OutputHeadActivations head;
  ASSIGN_OR_RETURN(
      loss.cross_entropy,
      OutputHeadForward(context, head_w, boundary[config_.layers].f32(),
                        batch.target_ids, &head));

  // ---- Backward. gradient holds d loss / d boundary[l + 1] on entry to
  // layer l's backward, and d loss / d boundary[l] after it.
  ASSIGN_OR_RETURN(Tensor gradient,
                   context.Allocate(MemoryComponent::kActivations, {n, d}));
  ASSIGN_OR_RETURN(Tensor next_gradient,
                   context.Allocate(MemoryComponent::kActivations, {n, d}));
  RETURN_IF_ERROR(OutputHeadBackward(context, head_w, head_g,
                                     boundary[config_.layers].f32(),
                                     batch.target_ids, &head, gradient.f32()));
  head = OutputHeadActivations();
  for (int64_t l = config_.layers - 1; l >= 0; --l) {
    const LayerParameters<const float> layer_w =
        LayerParametersAt<const float>(layout_, l, w);
    LayerActivations recomputed;
    if (config_.activation_checkpointing) {
      // Recompute the layer from its saved input. Its output equals
      // boundary[l + 1], which no later step reads: it takes the output.
      ASSIGN_OR_RETURN(
          const double aux,
          TransformerLayerForward(context, layer_w, boundary[l].f32(),
                                  boundary[l + 1].f32(), &recomputed));
      (void)aux;
    }
    boundary[l + 1].Reset();
    RETURN_IF_ERROR(TransformerLayerBackward(
        context, layer_w, LayerParametersAt<float>(layout_, l, g),
        boundary[l].f32(),
        config_.activation_checkpointing ? &recomputed : &kept[l],
        gradient.f32(), next_gradient.f32()));
    std::swap(gradient, next_gradient);
  }
  ops_->EmbeddingBackward(n, d, batch.input_ids.i32(), gradient.f32(),
                          g + layout_.embedding_offset());
  return loss;
}

absl::StatusOr<double> Model::Evaluate(const int32_t* tokens,
                                       int64_t sequences) {
  ASSIGN_OR_RETURN(Batch batch, LoadBatch(tokens, sequences));
  const LayerContext& context = batch.context;
  const int64_t n = context.tokens();
  const int64_t d = config_.d_model;
  const float* w = weights_.f32();
  expert_tokens_.assign(config_.layers, {});
  ASSIGN_OR_RETURN(Tensor x,
                   context.Allocate(MemoryComponent::kActivations, {n, d}));
  ASSIGN_OR_RETURN(Tensor y,
                   context.Allocate(MemoryComponent::kActivations, {n, d}));
  ops_->EmbeddingForward(n, d, batch.input_ids.i32(),
                         w + layout_.embedding_offset(), x.f32());
  for (int64_t l = 0; l < config_.layers; ++l) {
    LayerActivations transient;
    ASSIGN_OR_RETURN(const double aux,
                     TransformerLayerForward(
                         context, LayerParametersAt<const float>(layout_, l, w),
                         x.f32(), y.f32(), &transient));
    (void)aux;
    expert_tokens_[l] = transient.moe.balance.tokens_per_expert;
    std::swap(x, y);
  }
  OutputHeadActivations head;
  return OutputHeadForward(context,
                           OutputHeadParametersAt<const float>(layout_, w),
                           x.f32(), batch.target_ids, &head);
}

}  // namespace plateau::engine
