#include "engine/model/model_footprint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace plateau::engine {

BufferSpec ResidualStreamBuffer(const ModelConfig& config, int64_t sequences) {
  return DeviceBuffer(MemoryComponent::kActivations,
                      {sequences * config.seq_len, config.d_model});
}

BufferSpec ResidualGradientBuffer(const ModelConfig& config,
                                  int64_t sequences) {
  return BoundaryActivationsBuffer(config, sequences);
}

BufferSpec LayerBoundaryBuffer(const ModelConfig& config, int64_t sequences,
                               MemoryPool pool) {
  BufferSpec spec = BoundaryActivationsBuffer(config, sequences);
  spec.component = MemoryComponent::kCheckpoint;
  spec.pool = pool;
  return spec;
}

BufferSpec BoundaryActivationsBuffer(const ModelConfig& config,
                                     int64_t sequences) {
  return DeviceBuffer(MemoryComponent::kActivations,
                      {sequences * config.seq_len, config.d_model},
                      RoundedActivationType(config));
}

BufferSpec TokenIdsBuffer(const ModelConfig& config, int64_t sequences) {
  return DeviceBuffer(MemoryComponent::kActivations,
                      {sequences * config.seq_len}, DType::kInt32);
}

ModelStateBuffers ModelStateBuffers::For(const ParameterLayout& layout) {
  const int64_t parameters = layout.total_elements();
  int64_t largest = 1;
  for (const ParameterInfo& info : layout.parameters()) {
    largest = std::max(largest, info.elements);
  }
  ModelStateBuffers buffers;
  if (layout.bf16_weight_storage()) {
    buffers.weights =
        DeviceBuffer(MemoryComponent::kWeights, {layout.bf16_begin()});
    buffers.bf16_weights =
        DeviceBuffer(MemoryComponent::kWeights,
                     {parameters - layout.bf16_begin()}, DType::kBfloat16);
  } else {
    buffers.weights = DeviceBuffer(MemoryComponent::kWeights, {parameters});
  }
  if (layout.bf16_gradients()) {
    buffers.gradients =
        DeviceBuffer(MemoryComponent::kGradients, {layout.bf16_begin()});
    buffers.bf16_gradients =
        DeviceBuffer(MemoryComponent::kGradients,
                     {parameters - layout.bf16_begin()}, DType::kBfloat16);
  } else {
    buffers.gradients = DeviceBuffer(MemoryComponent::kGradients, {parameters});
  }
  buffers.initialization_chunk =
      DeviceBuffer(MemoryComponent::kStaging,
                   {std::min(largest, kInitializationChunkElements)});
  buffers.initialization_chunk.pool = MemoryPool::kHost;
  if (buffers.bf16_weights) {
    buffers.bf16_initialization_chunk = buffers.initialization_chunk;
    buffers.bf16_initialization_chunk->dtype = DType::kBfloat16;
  }
  if (const int64_t copy = layout.tied_head_copy_elements(); copy > 0) {
    buffers.tied_head_weights = DeviceBuffer(
        MemoryComponent::kWeights, {copy},
        layout.bf16_weight_storage() ? DType::kBfloat16 : DType::kFloat32);
    buffers.tied_head_gradients =
        DeviceBuffer(MemoryComponent::kGradients, {copy});
  }
  return buffers;
}

std::optional<BufferSpec> LayerWeightsCopyBuffer(const ModelConfig& config,
                                                 const ModelShard& shard) {
  if (config.matmul_precision != kernels::GemmPrecision::kBf16 ||
      config.bf16_weight_storage) {
    return std::nullopt;
  }
  return DeviceBuffer(
      MemoryComponent::kWeights,
      {config.attention_weight_elements() +
       3 * config.shared_hidden() * config.d_model +
       3 * shard.expert_count * config.ffn_hidden * config.d_model},
      DType::kBfloat16);
}

std::optional<BufferSpec> HeadWeightsCopyBuffer(const ModelConfig& config,
                                                const ModelShard& shard) {
  if (config.matmul_precision != kernels::GemmPrecision::kBf16 ||
      config.bf16_weight_storage) {
    return std::nullopt;
  }
  return DeviceBuffer(MemoryComponent::kWeights,
                      {shard.head_rows, config.d_model}, DType::kBfloat16);
}

std::optional<BufferSpec> LayerGradientsWindowBuffer(const ModelConfig& config,
                                                     const ModelShard& shard) {
  if (!config.bf16_gradients) return std::nullopt;
  return DeviceBuffer(
      MemoryComponent::kGradients,
      {config.attention_weight_elements() +
       3 * config.shared_hidden() * config.d_model +
       3 * shard.expert_count * config.ffn_hidden * config.d_model});
}

std::optional<BufferSpec> HeadGradientsWindowBuffer(const ModelConfig& config,
                                                    const ModelShard& shard) {
  if (!config.bf16_gradients ||
      (config.tie_embeddings && !shard.has_embedding)) {
    return std::nullopt;
  }
  return DeviceBuffer(MemoryComponent::kGradients,
                      {shard.head_rows, config.d_model});
}

std::optional<BufferSpec> TiedHeadGradientsBuffer(const ModelConfig& config,
                                                  const ModelShard& shard) {
  if (!config.tie_embeddings || !shard.has_embedding || shard.has_head) {
    return std::nullopt;
  }
  const int64_t copies = config.bf16_gradients ? 2 : 1;
  return DeviceBuffer(MemoryComponent::kGradients,
                      {copies * shard.head_rows, config.d_model});
}

int64_t EmbeddingSortScratchBytes(const ModelConfig& config,
                                  const ModelShard& shard, int64_t sequences) {
  if (!config.bf16_gradients || !shard.has_embedding) return 0;
  constexpr int64_t kMiB = int64_t{1} << 20;
  const int64_t bytes = sequences * config.seq_len * int64_t{sizeof(int32_t)};
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

void ModelSetUpFootprint(const ModelStateBuffers& buffers,
                         FootprintSink& sink) {
  sink.Allocate(buffers.weights);
  if (buffers.bf16_weights) sink.Allocate(*buffers.bf16_weights);
  sink.Allocate(buffers.gradients);
  if (buffers.bf16_gradients) sink.Allocate(*buffers.bf16_gradients);
  if (buffers.tied_head_weights) {
    sink.Allocate(*buffers.tied_head_weights);
    sink.Allocate(*buffers.tied_head_gradients);
  }
  FootprintSink::Handle chunk = sink.Allocate(buffers.initialization_chunk);
  FootprintSink::Handle rounded_chunk = 0;
  if (buffers.bf16_initialization_chunk) {
    rounded_chunk = sink.Allocate(*buffers.bf16_initialization_chunk);
  }
  sink.Free(&chunk);
  sink.Free(&rounded_chunk);
}

ModelFootprint::ModelFootprint(const ModelConfig& config,
                               const ModelShard& shard, FootprintSink* sink)
    : config_(config),
      shard_(shard),
      policy_(ActivationPolicyOf(config).value_or(ActivationPolicy::kKeep)),
      sink_(*sink) {}

void ModelFootprint::LayerForward(const PassShape& pass, int64_t layer,
                                  std::optional<DType> out, bool keep_saved,
                                  LayerSaved* saved) {
  const BufferSpec residual_stream =
      ResidualStreamBuffer(config_, pass.sequences);
  saved->mid = sink_.Allocate(residual_stream);
  AttentionForwardFootprint(AttentionBuffers::For(config_, pass.sequences),
                            sink_, &saved->attention);
  // A rounded out kept apart from mid is summed in a buffer of its own.
  const bool sum_apart = out && *out != DType::kFloat32 && keep_saved;
  Handle sum = sum_apart ? sink_.Allocate(residual_stream) : 0;
  MoeForwardFootprint(config_, pass.sequences, pass.dispatch[layer],
                      pass.expert_parallel, /*combine=*/out.has_value(), sink_,
                      &saved->moe);
  sink_.Free(&sum);
}

ModelFootprint::Handle ModelFootprint::Embed(const PassShape& pass,
                                             const BufferSpec& embedded) {
  Handle boundary = sink_.Allocate(embedded);
  // A float32 table's rows are gathered in float32, then rounded; a bf16
  // one's (bf16 weight storage) straight into the boundary.
  if (embedded.dtype != DType::kFloat32 && !config_.bf16_weight_storage) {
    Handle rows = sink_.Allocate(ResidualStreamBuffer(config_, pass.sequences));
    sink_.Free(&rows);
  }
  return boundary;
}

void ModelFootprint::LayerBackward(const PassShape& pass, int64_t layer,
                                   LayerSaved* saved) {
  MoeBackwardFootprint(config_, pass.sequences, pass.dispatch[layer],
                       pass.expert_parallel, sink_, &saved->moe);
  sink_.Free(&saved->mid);
  AttentionBackwardFootprint(AttentionBuffers::For(config_, pass.sequences),
                             sink_, &saved->attention);
}

ModelFootprint::Handle ModelFootprint::AllocatePassBuffer(
    const std::optional<BufferSpec>& spec) {
  return spec ? sink_.Allocate(*spec) : 0;
}

void ModelFootprint::ReleaseLayer(LayerSaved* saved) {
  ReleaseMoeFootprint(sink_, &saved->moe);
  sink_.Free(&saved->mid);
  ReleaseAttentionFootprint(sink_, &saved->attention);
}

void ModelFootprint::Release(MicroBatch* batch) {
  ReleaseOutputHeadFootprint(sink_, &batch->head);
  for (LayerSaved& saved : batch->kept) ReleaseLayer(&saved);
  for (Handle& handle : batch->offloaded) sink_.Free(&handle);
  for (Handle& handle : batch->boundary) sink_.Free(&handle);
  sink_.Free(&batch->target_ids);
  sink_.Free(&batch->input_ids);
}

ModelFootprint::Handle ModelFootprint::Forward(int64_t id,
                                               const PassShape& pass,
                                               Handle input) {
  const int64_t layers = shard_.layer_count;
  const BufferSpec boundary = LayerBoundaryBuffer(config_, pass.sequences);
  const BufferSpec host =
      LayerBoundaryBuffer(config_, pass.sequences, MemoryPool::kHost);
  MicroBatch& batch = in_flight_[id];
  batch.pass = &pass;
  sink_.SetPhase(absl::StrCat("micro-batch ", id, " forward"));
  // LoadMicroBatch, SetStageInput.
  const BufferSpec ids = TokenIdsBuffer(config_, pass.sequences);
  batch.input_ids = sink_.Allocate(ids);
  batch.target_ids = sink_.Allocate(ids);
  batch.boundary.assign(layers + 1, 0);
  batch.boundary[0] = shard_.has_embedding ? Embed(pass, boundary) : input;
  // LayersForward.
  const bool keep = policy_ == ActivationPolicy::kKeep;
  const bool offload = policy_ == ActivationPolicy::kRecomputeOffloaded;
  batch.kept.assign(keep ? layers : 0, LayerSaved());
  if (offload) {
    batch.offloaded.assign(layers, 0);
    if (layers > 0) batch.offloaded[0] = sink_.Allocate(host);
  }
  for (int64_t l = 0; l < layers; ++l) {
    sink_.SetPhase(absl::StrCat("micro-batch ", id, " forward, layer ",
                                shard_.first_layer + l));
    batch.boundary[l + 1] = sink_.Allocate(boundary);
    LayerSaved transient;
    Handle copy = AllocatePassBuffer(LayerWeightsCopyBuffer(config_, shard_));
    LayerForward(pass, l, boundary.dtype, /*keep_saved=*/keep,
                 keep ? &batch.kept[l] : &transient);
    sink_.Free(&copy);
    if (offload) {
      if (l + 1 < layers) batch.offloaded[l + 1] = sink_.Allocate(host);
      sink_.Free(&batch.boundary[l]);
    }
    ReleaseLayer(&transient);
  }
  if (!shard_.has_head) {
    Handle output = batch.boundary[layers];
    batch.boundary[layers] = 0;
    return output;
  }
  sink_.SetPhase(absl::StrCat("micro-batch ", id, " output head forward"));
  Handle copy = AllocatePassBuffer(HeadWeightsCopyBuffer(config_, shard_));
  OutputHeadForwardFootprint(config_, pass.sequences, pass.head, sink_,
                             &batch.head);
  sink_.Free(&copy);
  return 0;
}

ModelFootprint::Handle ModelFootprint::Backward(int64_t id,
                                                Handle output_gradient) {
  MicroBatch batch = std::move(in_flight_[id]);
  in_flight_.erase(id);
  const PassShape& pass = *batch.pass;
  const int64_t layers = shard_.layer_count;
  const BufferSpec boundary = LayerBoundaryBuffer(config_, pass.sequences);
  const BufferSpec gradient_spec =
      ResidualGradientBuffer(config_, pass.sequences);
  const bool offloaded = !batch.offloaded.empty();
  // FetchBoundary: the last layer's input comes back while the head
  // differentiates.
  if (offloaded && layers > 0) {
    batch.boundary[layers - 1] = sink_.Allocate(boundary);
  }
  Handle gradient = output_gradient;
  if (shard_.has_head) {
    sink_.SetPhase(absl::StrCat("micro-batch ", id, " output head backward"));
    gradient = sink_.Allocate(gradient_spec);
    Handle copy = AllocatePassBuffer(HeadWeightsCopyBuffer(config_, shard_));
    Handle window =
        AllocatePassBuffer(HeadGradientsWindowBuffer(config_, shard_));
    OutputHeadBackwardFootprint(config_, pass.sequences, pass.head, sink_,
                                &batch.head);
    sink_.Free(&window);
    sink_.Free(&copy);
    ReleaseOutputHeadFootprint(sink_, &batch.head);
    sink_.Free(&batch.boundary[layers]);
  }
  for (int64_t l = layers - 1; l >= 0; --l) {
    sink_.SetPhase(absl::StrCat("micro-batch ", id, " backward, layer ",
                                shard_.first_layer + l));
    if (offloaded) {
      sink_.Free(&batch.offloaded[l]);
      if (l > 0) batch.boundary[l - 1] = sink_.Allocate(boundary);
    }
    LayerSaved recomputed;
    const bool recompute = policy_ != ActivationPolicy::kKeep;
    Handle copy = AllocatePassBuffer(LayerWeightsCopyBuffer(config_, shard_));
    Handle window =
        AllocatePassBuffer(LayerGradientsWindowBuffer(config_, shard_));
    if (recompute) {
      LayerForward(pass, l, /*out=*/std::nullopt, /*keep_saved=*/true,
                   &recomputed);
    }
    LayerBackward(pass, l, recompute ? &recomputed : &batch.kept[l]);
    sink_.Free(&window);
    sink_.Free(&copy);
    sink_.Free(&batch.boundary[l]);
    ReleaseLayer(&recomputed);
  }
  if (shard_.has_embedding) {
    sink_.Free(&gradient);
    gradient = 0;
  }
  Release(&batch);
  return gradient;
}

void ModelFootprint::Evaluate(const PassShape& pass, Handle input) {
  const int64_t layers = shard_.layer_count;
  const BufferSpec ids = TokenIdsBuffer(config_, pass.sequences);
  Handle input_ids = sink_.Allocate(ids);
  Handle target_ids = sink_.Allocate(ids);
  const BufferSpec boundary =
      BoundaryActivationsBuffer(config_, pass.sequences);
  Handle current = shard_.has_embedding ? Embed(pass, boundary) : input;
  for (int64_t l = 0; l < layers; ++l) {
    Handle next = sink_.Allocate(boundary);
    LayerSaved transient;
    Handle copy = AllocatePassBuffer(LayerWeightsCopyBuffer(config_, shard_));
    LayerForward(pass, l, boundary.dtype, /*keep_saved=*/false, &transient);
    sink_.Free(&copy);
    sink_.Free(&current);
    ReleaseLayer(&transient);
    current = next;
  }
  if (shard_.has_head) {
    OutputHeadSaved head;
    Handle copy = AllocatePassBuffer(HeadWeightsCopyBuffer(config_, shard_));
    OutputHeadForwardFootprint(config_, pass.sequences, pass.head, sink_,
                               &head);
    sink_.Free(&copy);
    ReleaseOutputHeadFootprint(sink_, &head);
  }
  sink_.Free(&current);  // the head's input, or the output sent on
  sink_.Free(&target_ids);
  sink_.Free(&input_ids);
}

}  // namespace plateau::engine
