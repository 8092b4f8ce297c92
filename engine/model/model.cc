#include "engine/model/model.h"

#include <cmath>
#include <initializer_list>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/dispatch_strategy.h"
#include "engine/model/fill_with_zeros.h"
#include "engine/model/initial_weights.h"
#include "engine/model/model_footprint.h"
#include "engine/model/output_head.h"
#include "engine/model/transformer_layer.h"

namespace plateau::engine {

struct Model::MicroBatch {
  ~MicroBatch() {
    // A copy in flight must not outlive its buffers (an error path).
    if (copy_engine != nullptr) copy_engine->Wait(last_copy);
  }

  LayerContext context;
  Tensor input_ids;   // (N)  activations, int32
  Tensor target_ids;  // (N)  activations, int32
  // boundary[l] is shard layer l's input; boundary[layers] the shard's
  // output. Checkpoint component (the previous stage's output included),
  // RoundedActivationType (LayerBoundaryBuffer).
  std::vector<Tensor> boundary;
  std::vector<LayerActivations> kept;  // without checkpointing
  OutputHeadActivations head;          // on the last stage
  // SCO: offloaded[l] is boundary[l]'s host copy (checkpoint, host pool),
  // copies[l] the copy that last moved boundary l either way.
  CopyEngine* copy_engine = nullptr;
  std::vector<Tensor> offloaded;
  std::vector<CopyEngine::Ticket> copies;
  CopyEngine::Ticket last_copy = 0;
};

Model::Model(const ModelConfig& config, const ModelShard& shard,
             kernels::Ops* ops, AccountedAllocator* allocator,
             ModelGroups groups, ActivationPolicy policy)
    : config_(config),
      layout_(config, shard),
      ops_(ops),
      allocator_(allocator),
      groups_(groups),
      policy_(policy),
      dispatch_(&DispatchStrategyFor(config)),
      head_(&HeadStrategyFor(config)) {}

Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelConfig& config, const ModelShard& shard, kernels::Ops* ops,
    AccountedAllocator* allocator, ModelGroups groups) {
  return CreateWith(config, shard, ops, allocator, groups,
                    /*with_gradients=*/true);
}

absl::StatusOr<std::unique_ptr<Model>> Model::CreateForEvaluation(
    const ModelConfig& config, kernels::Ops* ops,
    AccountedAllocator* allocator) {
  return CreateWith(config, ModelShard::Whole(config), ops, allocator, {},
                    /*with_gradients=*/false);
}

absl::StatusOr<std::unique_ptr<Model>> Model::CreateWith(
    const ModelConfig& config, const ModelShard& shard, kernels::Ops* ops,
    AccountedAllocator* allocator, ModelGroups groups, bool with_gradients) {
  ASSIGN_OR_RETURN(const ActivationPolicy policy, ActivationPolicyOf(config));
  std::unique_ptr<Model> model(
      new Model(config, shard, ops, allocator, groups, policy));
  const ModelStateBuffers buffers = ModelStateBuffers::For(model->layout_);
  ASSIGN_OR_RETURN(model->weights_,
                   Tensor::Create(*allocator, buffers.weights));
  if (with_gradients) {
    ASSIGN_OR_RETURN(model->gradients_,
                     Tensor::Create(*allocator, buffers.gradients));
  }
  if (buffers.tied_head_weights) {
    ASSIGN_OR_RETURN(model->tied_head_weights_,
                     Tensor::Create(*allocator, *buffers.tied_head_weights));
    // Zeros until the first stage's rows arrive (bf16 with bf16 weight
    // storage).
    if (model->tied_head_weights_.dtype() == DType::kBfloat16) {
      FillWithZeros(*model->ops_, model->tied_head_weights_);
    } else {
      ops->Fill(model->tied_head_weights_.elements(), 0.0f,
                model->tied_head_weights_.f32());
    }
    if (with_gradients) {
      ASSIGN_OR_RETURN(
          model->tied_head_gradients_,
          Tensor::Create(*allocator, *buffers.tied_head_gradients));
    }
  }
  if (policy == ActivationPolicy::kRecomputeOffloaded) {
    model->checkpoint_copies_ = std::make_unique<CopyEngine>(ops);
  }
  if (config.matmul_precision == kernels::GemmPrecision::kBf16) {
    ops->SetMatmulStagingBytes(MatmulStagingBytes(config));
  } else if (config.bf16_weight_storage) {
    return absl::InvalidArgumentError(
        "bf16 weight storage needs bf16 products (precision: bf16)");
  }
  if (config.bf16_gradients && !config.bf16_weight_storage) {
    return absl::InvalidArgumentError(
        "bf16 gradient accumulation needs bf16 weight storage (precision: "
        "bf16 with the optimizer offloaded)");
  }
  if (buffers.bf16_weights) {
    ASSIGN_OR_RETURN(model->bf16_weights_,
                     Tensor::Create(*allocator, *buffers.bf16_weights));
  }
  if (with_gradients && buffers.bf16_gradients) {
    ASSIGN_OR_RETURN(model->bf16_gradients_,
                     Tensor::Create(*allocator, *buffers.bf16_gradients));
  }
  // Padding between the regions holds zeros, whatever is loaded later.
  ops->Fill(model->weights_.elements(), 0.0f, model->weights_.f32());
  FillWithZeros(*model->ops_, model->bf16_weights_);
  model->ZeroGradients();
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelConfig& config, kernels::Ops* ops,
    AccountedAllocator* allocator) {
  return Create(config, ModelShard::Whole(config), ops, allocator);
}

absl::Status Model::InitializeWeights(uint64_t seed) {
  // Generated on the host a bounded chunk at a time, then copied over.
  constexpr int64_t kChunkElements = kInitializationChunkElements;
  const ModelStateBuffers buffers = ModelStateBuffers::For(layout_);
  ASSIGN_OR_RETURN(Tensor staging,
                   Tensor::Create(*allocator_, buffers.initialization_chunk));
  Tensor rounded;
  if (buffers.bf16_initialization_chunk) {
    ASSIGN_OR_RETURN(
        rounded,
        Tensor::Create(*allocator_, *buffers.bf16_initialization_chunk));
  }
  const SplitBuffers stored = weight_buffers();
  for (const ParameterInfo& info : layout_.parameters()) {
    for (int64_t done = 0; done < info.elements; done += kChunkElements) {
      const int64_t count = std::min(kChunkElements, info.elements - done);
      InitialWeights(seed, info, info.global_offset + done, count,
                     staging.f32());
      const int64_t offset = info.offset + done;
      if (!stored.InBf16(offset)) {
        ops_->CopyFromHost(count * int64_t{sizeof(float)}, staging.f32(),
                           stored.Float32At(offset));
        continue;
      }
      for (int64_t i = 0; i < count; ++i) {
        rounded.bf16()[i] = kernels::FloatToBfloat16(staging.f32()[i]);
      }
      ops_->CopyFromHost(count * int64_t{sizeof(uint16_t)}, rounded.bf16(),
                         stored.Bf16At(offset));
    }
  }
  return absl::OkStatus();
}

void Model::UpdateExpertBias(
    const std::vector<std::vector<int64_t>>& expert_tokens) {
  if (!config_.expert_bias) return;
  const int64_t experts = config_.experts;
  std::vector<float> bias(experts);
  for (int64_t l = 0; l < layout_.shard().layer_count; ++l) {
    const std::vector<int64_t>& load = expert_tokens[l];
    int64_t total = 0;
    for (int64_t tokens : load) total += tokens;
    float* device_bias = weights_.f32() + layout_.layer(l).expert_bias;
    const int64_t bytes = experts * static_cast<int64_t>(sizeof(float));
    ops_->CopyToHost(bytes, device_bias, bias.data());
    for (int64_t e = 0; e < experts; ++e) {
      // load < mean <=> load * experts < total, in integers.
      const int64_t scaled_load = load[e] * experts;
      if (scaled_load < total) bias[e] += config_.expert_bias_update_rate;
      if (scaled_load > total) bias[e] -= config_.expert_bias_update_rate;
    }
    ops_->CopyFromHost(bytes, bias.data(), device_bias);
  }
}

void Model::ZeroGradients() {
  ops_->Fill(gradients_.elements(), 0.0f, gradients_.f32());
  FillWithZeros(*ops_, bf16_gradients_);
  if (!tied_head_gradients_.empty()) {
    ops_->Fill(tied_head_gradients_.elements(), 0.0f,
               tied_head_gradients_.f32());
  }
}

absl::StatusOr<std::unique_ptr<Model::MicroBatch>> Model::LoadMicroBatch(
    const int32_t* tokens, int64_t sequences,
    const LossWeights& weights) const {
  auto batch = std::make_unique<MicroBatch>();
  LayerContext& context = batch->context;
  context.config = &config_;
  context.shard = layout_.shard();
  context.ops = ops_;
  context.allocator = allocator_;
  context.groups = groups_;
  context.loss_weights = weights;
  context.sequences = sequences;
  context.dispatch = dispatch_;
  context.head = head_;
  const int64_t n = context.tokens();
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
  const BufferSpec ids = TokenIdsBuffer(config_, sequences);
  ASSIGN_OR_RETURN(batch->input_ids, context.Allocate(ids));
  ASSIGN_OR_RETURN(batch->target_ids, context.Allocate(ids));
  ops_->CopyFromHost(n * 4, inputs.data(), batch->input_ids.i32());
  ops_->CopyFromHost(n * 4, targets.data(), batch->target_ids.i32());
  return batch;
}

absl::Status Model::SetStageInput(MicroBatch& batch, Tensor input,
                                  const BufferSpec& embedded) {
  const ModelShard& shard = layout_.shard();
  batch.boundary.resize(shard.layer_count + 1);
  if (!shard.has_embedding) {
    if (input.dtype() != embedded.dtype ||
        input.elements() != embedded.elements()) {
      return absl::InternalError(absl::StrCat(
          "the stage's input has ", input.elements(), " elements of ",
          DTypeName(input.dtype()), "; its first layer reads ",
          embedded.elements(), " of ", DTypeName(embedded.dtype)));
    }
    batch.boundary[0] = std::move(input);
    return absl::OkStatus();
  }
  const int64_t n = batch.context.tokens();
  const int64_t d = config_.d_model;
  ASSIGN_OR_RETURN(batch.boundary[0], batch.context.Allocate(embedded));
  const SplitBuffers stored = weight_buffers();
  if (stored.InBf16(layout_.embedding_offset())) {
    // bf16 weight storage (precision bf16): the stored rows are the
    // rounded ones.
    ops_->EmbeddingForwardBf16(n, d, batch.input_ids.i32(),
                               stored.Bf16At(layout_.embedding_offset()),
                               batch.boundary[0].bf16());
    return absl::OkStatus();
  }
  const float* table = weights_.f32() + layout_.embedding_offset();
  if (embedded.dtype == DType::kFloat32) {
    ops_->EmbeddingForward(n, d, batch.input_ids.i32(), table,
                           batch.boundary[0].f32());
    return absl::OkStatus();
  }
  // A rounded boundary: the rows gathered in float32, then rounded.
  ASSIGN_OR_RETURN(Tensor rows, batch.context.Allocate(ResidualStreamBuffer(
                                    config_, batch.context.sequences)));
  ops_->EmbeddingForward(n, d, batch.input_ids.i32(), table, rows.f32());
  ops_->CopyToBf16(n * d, rows.f32(), batch.boundary[0].bf16());
  return absl::OkStatus();
}

absl::StatusOr<RouterLosses> Model::LayersForward(MicroBatch& batch,
                                                  bool for_backward) {
  const LayerContext& context = batch.context;
  const int64_t layers = layout_.shard().layer_count;
  const bool keep = for_backward && policy_ == ActivationPolicy::kKeep;
  const bool offload =
      for_backward && policy_ == ActivationPolicy::kRecomputeOffloaded;
  batch.kept.resize(keep ? layers : 0);
  expert_tokens_.assign(layers, {});
  if (offload) {
    batch.copy_engine = checkpoint_copies_.get();
    batch.offloaded.resize(layers);
    batch.copies.assign(layers, 0);
    if (layers > 0) RETURN_IF_ERROR(OffloadBoundary(batch, 0));
  }
  RouterLosses total;
  for (int64_t l = 0; l < layers; ++l) {
    // Forward-only passes keep no boundary but the current one.
    ASSIGN_OR_RETURN(
        batch.boundary[l + 1],
        context.Allocate(
            for_backward
                ? LayerBoundaryBuffer(config_, context.sequences)
                : BoundaryActivationsBuffer(config_, context.sequences)));
    LayerActivations transient;
    LayerActivations& saved = keep ? batch.kept[l] : transient;
    Tensor weights_copy;
    ASSIGN_OR_RETURN(const LayerParameters<const float> layer_weights,
                     LayerWeightsForPass(l, &weights_copy));
    ASSIGN_OR_RETURN(
        const RouterLosses losses,
        TransformerLayerForward(context, layer_weights, batch.boundary[l],
                                &batch.boundary[l + 1],
                                /*keep_saved=*/keep, &saved));
    weights_copy.Reset();
    total += losses;
    expert_tokens_[l] = saved.moe.balance.tokens_per_expert;
    if (offload) {
      // The next input starts for the host while this one, copied during
      // the layer, leaves the device. The shard's output stays: the head
      // or the next stage takes it at once.
      if (l + 1 < layers) RETURN_IF_ERROR(OffloadBoundary(batch, l + 1));
      checkpoint_copies_->Wait(batch.copies[l]);
      batch.boundary[l].Reset();
    }
    if (!for_backward) batch.boundary[l].Reset();
  }
  return total;
}

absl::Status Model::CheckProductWeightsAdjacent(int64_t layer) const {
  const LayerOffsets& offsets = layout_.layer(layer);
  const int64_t d = config_.d_model;
  const int64_t shared_matrix = config_.shared_hidden() * d;
  const int64_t expert_matrix =
      layout_.shard().expert_count * config_.ffn_hidden * d;
  if (offsets.wo != offsets.wqkv + config_.qkv_width() * d ||
      (shared_matrix > 0 &&
       (offsets.shared_w1 != offsets.wo + d * d ||
        offsets.shared_w3 != offsets.shared_w1 + shared_matrix ||
        offsets.shared_w2 != offsets.shared_w3 + shared_matrix)) ||
      offsets.w3 != offsets.w1 + expert_matrix ||
      offsets.w2 != offsets.w3 + expert_matrix) {
    return absl::InternalError(absl::StrCat(
        "layer ", layer,
        "'s product weights are not adjacent in the parameter layout; their "
        "bf16 copy and gradient window assume they are"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerParameters<const float>> Model::LayerWeightsForPass(
    int64_t layer, Tensor* copy) const {
  if (layout_.bf16_weight_storage()) {
    // The stored bf16 weights are the operands.
    return LayerParametersAt(
        layout_, layer, weights_.f32(),
        [this](int64_t offset) { return StoredOperand(offset); });
  }
  LayerParameters<const float> weights =
      LayerParametersAt<const float>(layout_, layer, weights_.f32());
  const std::optional<BufferSpec> spec =
      LayerWeightsCopyBuffer(config_, layout_.shard());
  if (!spec) return weights;
  RETURN_IF_ERROR(CheckProductWeightsAdjacent(layer));
  ASSIGN_OR_RETURN(*copy, Tensor::Create(*allocator_, *spec));
  const int64_t attention = config_.attention_weight_elements();
  const int64_t shared = 3 * config_.shared_hidden() * config_.d_model;
  const int64_t experts = copy->elements() - attention - shared;
  // Each range of adjacent matrices is rounded in one conversion, and each
  // matrix's operand reads its place in the copy.
  uint16_t* next_copy = copy->bf16();
  auto copy_range = [&](std::initializer_list<LinearOperand*> matrices,
                        int64_t elements) {
    const float* first = (*matrices.begin())->f32;
    ops_->CopyToBf16(elements, first, next_copy);
    for (LinearOperand* matrix : matrices) {
      matrix->bf16 = next_copy + (matrix->f32 - first);
    }
    next_copy += elements;
  };
  AttentionParameters<const float>& attention_weights = weights.attention;
  copy_range({&attention_weights.wqkv, &attention_weights.wo}, attention);
  SharedExpertParameters<const float>& shared_weights = weights.moe.shared;
  if (shared > 0) {
    copy_range({&shared_weights.w1, &shared_weights.w3, &shared_weights.w2},
               shared);
  }
  ExpertParameters<const float>& expert_weights = weights.moe.experts;
  copy_range({&expert_weights.w1, &expert_weights.w3, &expert_weights.w2},
             experts);
  return weights;
}

OutputHeadParameters<const float> Model::HeadWeights() const {
  const float* norm = weights_.f32() + layout_.final_norm_offset();
  if (tied_head_weights_.dtype() == DType::kBfloat16) {
    return {norm, {nullptr, tied_head_weights_.bf16()}};
  }
  if (!tied_head_weights_.empty()) {
    return {norm, FloatOperand(tied_head_weights_.f32())};
  }
  return {norm, StoredOperand(layout_.lm_head_offset())};
}

LinearOperand Model::StoredOperand(int64_t offset) const {
  if (offset < weights_.elements()) {
    return FloatOperand(weights_.f32() + offset);
  }
  return {nullptr, bf16_weights_.bf16() + (offset - weights_.elements())};
}

OutputHeadParameters<float> Model::HeadGradients(GradientWindow* window) {
  float* flat = gradients_.f32();
  float* lm_head = flat + layout_.lm_head_offset();
  if (!tied_head_gradients_.empty()) lm_head = tied_head_gradients_.f32();
  if (window) lm_head = window->At(layout_.lm_head_offset());
  return {flat + layout_.final_norm_offset(), lm_head};
}

absl::StatusOr<std::optional<GradientWindow>> Model::OpenLayerGradients(
    int64_t layer) {
  const std::optional<BufferSpec> spec =
      LayerGradientsWindowBuffer(config_, layout_.shard());
  if (!spec) return std::nullopt;
  // A layer's dense product weights are one range (wq, wk, wv, wo, the
  // shared experts' w1, w3 and w2), its routed experts' w1, w3 and w2
  // another.
  RETURN_IF_ERROR(CheckProductWeightsAdjacent(layer));
  const LayerOffsets& offsets = layout_.layer(layer);
  const int64_t d = config_.d_model;
  const int64_t dense =
      config_.attention_weight_elements() + 3 * config_.shared_hidden() * d;
  return GradientWindow::Open(
      gradient_buffers(),
      {{offsets.wqkv, dense}, {offsets.w1, spec->elements() - dense}}, *spec,
      *ops_, *allocator_);
}

absl::StatusOr<std::optional<GradientWindow>> Model::OpenHeadGradients() {
  const std::optional<BufferSpec> spec =
      HeadGradientsWindowBuffer(config_, layout_.shard());
  if (!spec) return std::nullopt;
  return GradientWindow::Open(gradient_buffers(),
                              {{layout_.lm_head_offset(), spec->elements()}},
                              *spec, *ops_, *allocator_);
}

absl::StatusOr<OutputHeadParameters<const float>> Model::HeadWeightsForPass(
    Tensor* copy) const {
  OutputHeadParameters<const float> weights = HeadWeights();
  const std::optional<BufferSpec> spec =
      HeadWeightsCopyBuffer(config_, layout_.shard());
  if (!spec) return weights;
  ASSIGN_OR_RETURN(*copy, Tensor::Create(*allocator_, *spec));
  ops_->CopyToBf16(copy->elements(), weights.lm_head.f32, copy->bf16());
  weights.lm_head.bf16 = copy->bf16();
  return weights;
}

absl::StatusOr<double> Model::HeadForward(const MicroBatch& batch,
                                          const Tensor& x,
                                          OutputHeadActivations* saved) const {
  Tensor weights_copy;
  ASSIGN_OR_RETURN(const OutputHeadParameters<const float> head_weights,
                   HeadWeightsForPass(&weights_copy));
  return OutputHeadForward(batch.context, head_weights, x, batch.target_ids,
                           saved);
}

absl::Status Model::OffloadBoundary(MicroBatch& batch, int64_t layer) {
  const Tensor& device = batch.boundary[layer];
  ASSIGN_OR_RETURN(batch.offloaded[layer],
                   batch.context.Allocate(LayerBoundaryBuffer(
                       config_, batch.context.sequences, MemoryPool::kHost)));
  batch.last_copy = batch.copies[layer] = checkpoint_copies_->ToHost(
      device.bytes(), device.data(), batch.offloaded[layer].data());
  return absl::OkStatus();
}

absl::Status Model::FetchBoundary(MicroBatch& batch, int64_t layer) {
  const Tensor& host = batch.offloaded[layer];
  ASSIGN_OR_RETURN(batch.boundary[layer],
                   batch.context.Allocate(
                       LayerBoundaryBuffer(config_, batch.context.sequences)));
  batch.last_copy = batch.copies[layer] = checkpoint_copies_->FromHost(
      host.bytes(), host.data(), batch.boundary[layer].data());
  return absl::OkStatus();
}

absl::StatusOr<StageOutput> Model::Forward(int64_t id, const int32_t* tokens,
                                           int64_t sequences, Tensor input,
                                           const LossWeights& weights) {
  if (gradients_.empty()) {
    return absl::FailedPreconditionError(
        "this model was created for evaluation: it has no gradients to train");
  }
  if (in_flight_.count(id)) {
    return absl::InternalError(
        absl::StrCat("micro-batch ", id, " is already in flight"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MicroBatch> batch,
                   LoadMicroBatch(tokens, sequences, weights));
  const ModelShard& shard = layout_.shard();
  RETURN_IF_ERROR(SetStageInput(*batch, std::move(input),
                                LayerBoundaryBuffer(config_, sequences)));
  StageOutput output;
  ASSIGN_OR_RETURN(output.router, LayersForward(*batch, /*for_backward=*/true));
  if (shard.has_head) {
    ASSIGN_OR_RETURN(
        output.cross_entropy,
        HeadForward(*batch, batch->boundary[shard.layer_count], &batch->head));
  } else {
    // The next stage takes the output: this stage's backward never reads
    // it (recomputing the last layer writes a fresh buffer).
    output.activations = std::move(batch->boundary[shard.layer_count]);
  }
  in_flight_[id] = std::move(batch);
  return output;
}

absl::StatusOr<Tensor> Model::Backward(int64_t id, Tensor output_gradient) {
  auto found = in_flight_.find(id);
  if (found == in_flight_.end()) {
    return absl::InternalError(
        absl::StrCat("no forward of micro-batch ", id, " to differentiate"));
  }
  std::unique_ptr<MicroBatch> batch = std::move(found->second);
  in_flight_.erase(found);
  const LayerContext& context = batch->context;
  const int64_t n = context.tokens();
  const int64_t d = config_.d_model;
  const ModelShard& shard = layout_.shard();
  const int64_t layers = shard.layer_count;
  float* g = gradients_.f32();

  const bool offloaded = !batch->offloaded.empty();
  // The last layer's input comes back while the head differentiates.
  if (offloaded && layers > 0)
    RETURN_IF_ERROR(FetchBoundary(*batch, layers - 1));

  // gradient holds d loss / d boundary[l + 1] on entry to layer l's
  // backward, and d loss / d boundary[l] after it.
  Tensor gradient;
  if (shard.has_head) {
    ASSIGN_OR_RETURN(gradient, context.Allocate(ResidualGradientBuffer(
                                   config_, context.sequences)));
    Tensor weights_copy;
    ASSIGN_OR_RETURN(const OutputHeadParameters<const float> head_weights,
                     HeadWeightsForPass(&weights_copy));
    ASSIGN_OR_RETURN(std::optional<GradientWindow> window, OpenHeadGradients());
    RETURN_IF_ERROR(OutputHeadBackward(
        context, head_weights, HeadGradients(window ? &*window : nullptr),
        batch->boundary[layers], batch->target_ids, &batch->head, &gradient));
    if (window) window->Close(*ops_);
    weights_copy.Reset();
    batch->head = OutputHeadActivations();
    batch->boundary[layers].Reset();
  } else {
    gradient = std::move(output_gradient);
  }
  for (int64_t l = layers - 1; l >= 0; --l) {
    if (offloaded) {
      // This layer's input is back; the previous one starts coming back
      // while this layer recomputes and differentiates.
      checkpoint_copies_->Wait(batch->copies[l]);
      batch->offloaded[l].Reset();
      if (l > 0) RETURN_IF_ERROR(FetchBoundary(*batch, l - 1));
    }
    LayerActivations recomputed;
    const bool recompute = policy_ != ActivationPolicy::kKeep;
    // One copy of the weights for the recompute and the backward.
    Tensor weights_copy;
    ASSIGN_OR_RETURN(const LayerParameters<const float> layer_weights,
                     LayerWeightsForPass(l, &weights_copy));
    ASSIGN_OR_RETURN(std::optional<GradientWindow> window,
                     OpenLayerGradients(l));
    const LayerParameters<float> layer_gradients =
        window ? LayerParametersAt<float>(
                     layout_, l, g,
                     [&window](int64_t offset) { return window->At(offset); })
               : LayerParametersAt<float>(layout_, l, g);
    if (recompute) {
      // Only the activations: the layer's output is boundary[l + 1],
      // which backward does not read.
      ASSIGN_OR_RETURN(const RouterLosses losses,
                       TransformerLayerForward(
                           context, layer_weights, batch->boundary[l],
                           /*out=*/nullptr, /*keep_saved=*/true, &recomputed));
      (void)losses;
    }
    RETURN_IF_ERROR(TransformerLayerBackward(
        context, layer_weights, layer_gradients, batch->boundary[l],
        recompute ? &recomputed : &batch->kept[l], &gradient));
    if (window) window->Close(*ops_);
    weights_copy.Reset();
    batch->boundary[l].Reset();
  }
  if (shard.has_embedding) {
    const SplitBuffers stored = gradient_buffers();
    const int64_t offset = layout_.embedding_offset();
    const int32_t* ids = batch->input_ids.i32();
    if (stored.InBf16(offset)) {
      ops_->EmbeddingBackwardBf16(n, d, ids, gradient.bf16(),
                                  stored.Bf16At(offset));
    } else if (gradient.dtype() == DType::kBfloat16) {
      ops_->EmbeddingBackwardFromBf16(n, d, ids, gradient.bf16(),
                                      stored.Float32At(offset));
    } else {
      ops_->EmbeddingBackward(n, d, ids, gradient.f32(),
                              stored.Float32At(offset));
    }
    return Tensor();
  }
  return gradient;
}

absl::StatusOr<StepLoss> Model::ForwardBackward(const int32_t* tokens,
                                                int64_t sequences) {
  LossWeights weights;
  weights.cross_entropy_per_token =
      1.0 / static_cast<double>(sequences * config_.seq_len);
  return ForwardBackward(tokens, sequences, weights);
}

absl::StatusOr<StepLoss> Model::ForwardBackward(const int32_t* tokens,
                                                int64_t sequences,
                                                const LossWeights& weights) {
  ASSIGN_OR_RETURN(StageOutput output,
                   Forward(0, tokens, sequences, Tensor(), weights));
  ASSIGN_OR_RETURN(Tensor input_gradient, Backward(0, Tensor()));
  (void)input_gradient;
  StepLoss loss;
  loss.cross_entropy = output.cross_entropy;
  loss.load_balancing = output.router.load_balancing;
  loss.z_loss = output.router.z_loss;
  return loss;
}

absl::StatusOr<StageOutput> Model::EvaluateStage(const int32_t* tokens,
                                                 int64_t sequences,
                                                 Tensor input) {
  ASSIGN_OR_RETURN(std::unique_ptr<MicroBatch> batch,
                   LoadMicroBatch(tokens, sequences, LossWeights()));
  const ModelShard& shard = layout_.shard();
  RETURN_IF_ERROR(SetStageInput(*batch, std::move(input),
                                BoundaryActivationsBuffer(config_, sequences)));
  StageOutput output;
  ASSIGN_OR_RETURN(const RouterLosses losses,
                   LayersForward(*batch, /*for_backward=*/false));
  (void)losses;
  Tensor& last = batch->boundary[shard.layer_count];
  if (!shard.has_head) {
    output.activations = std::move(last);
    return output;
  }
  OutputHeadActivations head;
  ASSIGN_OR_RETURN(output.cross_entropy, HeadForward(*batch, last, &head));
  return output;
}

}  // namespace plateau::engine
