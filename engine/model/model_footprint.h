// The footprints of a transformer layer (transformer_layer.h) and of Model
// (model.h) on one rank's shard: a micro-batch's Forward and Backward, with
// several in flight as the pipeline schedule has them, and EvaluateStage.
// The memory planner orders these along a step; it restates no size.
#ifndef PLATEAU_ENGINE_MODEL_MODEL_FOOTPRINT_H_
#define PLATEAU_ENGINE_MODEL_MODEL_FOOTPRINT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "engine/memory/footprint.h"
#include "engine/model/activation_policy.h"
#include "engine/model/attention_footprint.h"
#include "engine/model/model_config.h"
#include "engine/model/model_shard.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/output_head_footprint.h"
#include "engine/model/parameter_layout.h"

namespace plateau::engine {

// The footprint's handles of LayerActivations.
struct LayerSaved {
  AttentionSaved attention;
  FootprintSink::Handle mid = 0;
  MoeSaved moe;
};

// What one micro-batch pass of a shard moves: its sequences on this rank,
// each shard layer's dispatch, and the head's vocabulary layout.
struct PassShape {
  int64_t sequences = 0;
  std::vector<DispatchShape> dispatch;  // one per shard layer
  bool expert_parallel = false;
  HeadLayout head;
};

// A micro-batch's residual stream in float32, (N, D) activations: a layer's
// mid, and a layer's float32 sum before it is rounded.
BufferSpec ResidualStreamBuffer(const ModelConfig& config, int64_t sequences);

// The gradient of the residual stream in backward, (N, D) activations,
// RoundedActivationType: one buffer a micro-batch, which the head writes,
// each block's backward updates in place (the norm's part added and the sum
// rounded once, so twice a layer under bf16, as Megatron-Core's bf16
// gradients are), the embedding's backward reads, and a stage sends the
// previous one. Under bf16 its readers are bf16 products (which would round
// it anyway) and the combine's, the norms' and the embedding's backward,
// which widen it.
BufferSpec ResidualGradientBuffer(const ModelConfig& config, int64_t sequences);

// The residual stream between layers, (N, D), RoundedActivationType: the
// embedding's output, each layer's output (the next layer's, the next
// stage's or the head's input). Each is rounded once where it is made, so
// that under bf16 the boundaries training keeps (and SCO moves, and the
// pipeline sends) are half the bytes, and a recompute reads what the
// forward read; their readers widen them exactly. Training keeps them for
// backward: component checkpoint, on the device or (SCO) the host.
BufferSpec LayerBoundaryBuffer(const ModelConfig& config, int64_t sequences,
                               MemoryPool pool = MemoryPool::kDevice);
// The same as activations: what a forward-only pass (evaluation), which
// keeps none, passes between layers, and what a stage receives from the
// previous one.
BufferSpec BoundaryActivationsBuffer(const ModelConfig& config,
                                     int64_t sequences);
// A micro-batch's input or target token ids, (N) activations, int32.
BufferSpec TokenIdsBuffer(const ModelConfig& config, int64_t sequences);

// What a shard's Model holds for the run: its weights and gradients, flat
// (P) on the device; and the host staging InitializeWeights fills a chunk
// at a time.
struct ModelStateBuffers {
  static ModelStateBuffers For(const ParameterLayout& layout);

  // (P) weights; with bf16 weight storage (bf16_begin) float32 weights
  // and `bf16_weights` (P - bf16_begin) in bf16 (SplitBuffers).
  BufferSpec weights;
  std::optional<BufferSpec> bf16_weights;
  // (P) gradients; with bf16 gradient accumulation (bf16_begin) float32
  // gradients and `bf16_gradients` (P - bf16_begin) in bf16.
  BufferSpec gradients;
  std::optional<BufferSpec> bf16_gradients;
  BufferSpec initialization_chunk;  // host staging, at most 1 << 20
  // Its values rounded, for bf16_weights; nullopt without.
  std::optional<BufferSpec> bf16_initialization_chunk;
  // A last stage's copy of tied head rows (bf16 with bf16 weight storage,
  // as the first stage's table is) and their float32 gradient
  // (ParameterLayout::tied_head_copy_elements); nullopt without one.
  std::optional<BufferSpec> tied_head_weights;    // weights
  std::optional<BufferSpec> tied_head_gradients;  // gradients
};
inline constexpr int64_t kInitializationChunkElements = int64_t{1} << 20;

// Under bf16 products, the bf16 copy (Model::LayerWeightsForPass) that each
// pass over one of the shard's layers makes of the layer's product weights:
// its q, k, v and output projections, its shared experts' and its routed
// experts' three matrices, ((qkv_width + D) D + 3 shared_hidden D + 3 local
// experts F D) weights; and that each pass through the head makes of the
// shard's lm_head rows, (head rows, D) weights. nullopt under fp32, and
// with bf16 weight storage (the passes read the stored weights: the lm_head,
// the embedding's tied rows, or a last stage's bf16 copy of them).
std::optional<BufferSpec> LayerWeightsCopyBuffer(const ModelConfig& config,
                                                 const ModelShard& shard);
std::optional<BufferSpec> HeadWeightsCopyBuffer(const ModelConfig& config,
                                                const ModelShard& shard);
// With bf16 gradient accumulation (ModelConfig::bf16_gradients), the
// float32 window (GradientWindow) that each backward pass over one of the
// shard's layers accumulates its product weights' gradients in (as many
// elements as LayerWeightsCopyBuffer), and that each backward through the
// head accumulates its lm_head rows' in ((head rows, D), tied rows of the
// embedding too; none for a last stage's copy of them, whose gradient is
// float32). nullopt otherwise.
std::optional<BufferSpec> LayerGradientsWindowBuffer(const ModelConfig& config,
                                                     const ModelShard& shard);
std::optional<BufferSpec> HeadGradientsWindowBuffer(const ModelConfig& config,
                                                    const ModelShard& shard);
// With tied embeddings over pipeline stages, the first stage's buffer for
// its last stage's head gradient (tied_head.h), the shard's head rows of
// (head rows, D) float32, twice that with bf16 gradient accumulation (the
// stored rows widened beside it, so they are rounded once); nullopt on any
// other rank.
std::optional<BufferSpec> TiedHeadGradientsBuffer(const ModelConfig& config,
                                                  const ModelShard& shard);
// With bf16 gradient accumulation on a shard with the embedding, the
// kernel scratch (kernels::ScratchArena, component `other`) that the CPU
// backend's EmbeddingBackwardBf16 takes to sort a micro-batch of
// `sequences` by token id, 4 bytes a token, in the arena's whole MiBs; 0
// otherwise. The arena keeps its largest block, so a step holds the larger
// of this and MatmulStagingBytes.
int64_t EmbeddingSortScratchBytes(const ModelConfig& config,
                                  const ModelShard& shard, int64_t sequences);
// Model::Create then InitializeWeights.
void ModelSetUpFootprint(const ModelStateBuffers& buffers, FootprintSink& sink);

class ModelFootprint {
 public:
  using Handle = FootprintSink::Handle;

  // Phases are named "micro-batch 3 forward, layer 5" and so on. REQUIRES:
  // ActivationPolicyOf(config) is ok (as Model::Create does).
  ModelFootprint(const ModelConfig& config, const ModelShard& shard,
                 FootprintSink* sink);

  // Model::Forward of micro-batch `id`. `input` is the previous stage's
  // output (0 on the first stage), which the micro-batch takes. Returns the
  // stage output (0 on the last stage) for the caller to send and free.
  // `pass` must outlive the micro-batch's Backward.
  Handle Forward(int64_t id, const PassShape& pass, Handle input);
  // Model::Backward of micro-batch `id`; takes `output_gradient` (0 on the
  // last stage) and returns the input gradient (0 on the first stage) for
  // the caller to send and free.
  Handle Backward(int64_t id, Handle output_gradient);
  // Model::EvaluateStage: forward only, keeping nothing. Takes `input`.
  void Evaluate(const PassShape& pass, Handle input);

 private:
  // Model::MicroBatch's handles.
  struct MicroBatch {
    const PassShape* pass = nullptr;
    Handle input_ids = 0, target_ids = 0;
    std::vector<Handle> boundary;   // device (checkpoint, or received)
    std::vector<Handle> offloaded;  // SCO: host copies of the boundaries
    std::vector<LayerSaved> kept;   // without activation checkpointing
    OutputHeadSaved head;
  };

  // TransformerLayerForward with an out of type `out` (nullopt: a
  // recompute's null out) and keep_saved.
  void LayerForward(const PassShape& pass, int64_t layer,
                    std::optional<DType> out, bool keep_saved,
                    LayerSaved* saved);
  // Model::SetStageInput on the first stage: the embedded tokens in
  // `embedded`.
  Handle Embed(const PassShape& pass, const BufferSpec& embedded);
  void LayerBackward(const PassShape& pass, int64_t layer, LayerSaved* saved);
  void ReleaseLayer(LayerSaved* saved);
  void Release(MicroBatch* batch);
  // A pass's copy of its weights (LayerWeightsCopyBuffer or
  // HeadWeightsCopyBuffer) or window onto its gradients
  // (LayerGradientsWindowBuffer, HeadGradientsWindowBuffer); 0 when there is
  // none.
  Handle AllocatePassBuffer(const std::optional<BufferSpec>& spec);

  const ModelConfig& config_;
  const ModelShard shard_;
  const ActivationPolicy policy_;
  FootprintSink& sink_;
  std::map<int64_t, MicroBatch> in_flight_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_MODEL_FOOTPRINT_H_
