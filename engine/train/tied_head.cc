#include "engine/train/tied_head.h"

#include <optional>

#include "common/status_macros.h"
#include "engine/model/model_footprint.h"

namespace plateau::engine {
namespace {

// Above every micro-batch tag of StageLinks (ids below 2^30, two tags each).
constexpr uint32_t kTiedHeadWeightsTag = uint32_t{1} << 31;
constexpr uint32_t kTiedHeadGradientsTag = kTiedHeadWeightsTag + 1;

// The first stage's rows of embed.weight that are the last stage's head.
float* HeadRowsOfTable(Model& model, Tensor& flat) {
  const ParameterLayout& layout = model.layout();
  return flat.f32() + layout.embedding_offset() +
         layout.shard().head_first_row * model.config().d_model;
}

bool TiedOverStages(const RankContext& ranks, const Model& model) {
  return model.config().tie_embeddings && ranks.sizes.pp > 1;
}

}  // namespace

absl::Status ShareTiedHeadWeights(const RankContext& ranks, Model& model) {
  if (!TiedOverStages(ranks, model)) return absl::OkStatus();
  const int last = ranks.sizes.pp - 1;
  if (ranks.first_stage()) {
    const ModelShard& shard = model.layout().shard();
    return ranks.pipeline->Send(
        HeadRowsOfTable(model, model.weights()),
        shard.head_rows * model.config().d_model * kFloatBytes, last,
        kTiedHeadWeightsTag);
  }
  if (!ranks.last_stage()) return absl::OkStatus();
  Tensor& copy = model.tied_head_weights();
  return ranks.pipeline->Receive(copy.data(), copy.bytes(), 0,
                                 kTiedHeadWeightsTag);
}

absl::Status AddTiedHeadGradients(const RankContext& ranks, Model& model,
                                  AccountedAllocator& allocator) {
  if (!TiedOverStages(ranks, model)) return absl::OkStatus();
  if (ranks.last_stage()) {
    const Tensor& gradients = model.tied_head_gradients();
    return ranks.pipeline->Send(gradients.data(), gradients.bytes(), 0,
                                kTiedHeadGradientsTag);
  }
  const std::optional<BufferSpec> spec =
      TiedHeadGradientsBuffer(model.config(), model.layout().shard());
  if (!spec) return absl::OkStatus();
  ASSIGN_OR_RETURN(Tensor received, Tensor::Create(allocator, *spec));
  RETURN_IF_ERROR(ranks.pipeline->Receive(received.data(), received.bytes(),
                                          ranks.sizes.pp - 1,
                                          kTiedHeadGradientsTag));
  float* rows = HeadRowsOfTable(model, model.gradients());
  model.ops().Add(received.elements(), rows, received.f32(), rows);
  return absl::OkStatus();
}

}  // namespace plateau::engine
