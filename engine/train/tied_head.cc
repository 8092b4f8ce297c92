#include "engine/train/tied_head.h"

#include <optional>

#include "common/status_macros.h"
#include "engine/memory/dtype.h"
#include "engine/model/model_footprint.h"
#include "engine/model/split_buffers.h"
#include "kernels/ops.h"

namespace plateau::engine {
namespace {

// Above every micro-batch tag of StageLinks (ids below 2^30, two tags each).
constexpr uint32_t kTiedHeadWeightsTag = uint32_t{1} << 31;
constexpr uint32_t kTiedHeadGradientsTag = kTiedHeadWeightsTag + 1;

// Where the first stage's rows of embed.weight that are the last stage's
// head begin: the layout offset of the shard's head rows.
int64_t HeadRowsOffset(const Model& model) {
  const ParameterLayout& layout = model.layout();
  return layout.embedding_offset() +
         layout.shard().head_first_row * model.config().d_model;
}

int64_t HeadRowElements(const Model& model) {
  return model.layout().shard().head_rows * model.config().d_model;
}

bool TiedOverStages(const RankContext& ranks, const Model& model) {
  return model.config().tie_embeddings && ranks.sizes.pp > 1;
}

}  // namespace

absl::Status ShareTiedHeadWeights(const RankContext& ranks, Model& model) {
  if (!TiedOverStages(ranks, model)) return absl::OkStatus();
  const int last = ranks.sizes.pp - 1;
  if (ranks.first_stage()) {
    // float32 rows, or bf16 ones with bf16 weight storage: the last
    // stage's copy has the table's type (ModelStateBuffers).
    const SplitBuffers stored = model.weight_buffers();
    const int64_t offset = HeadRowsOffset(model);
    const int64_t elements = HeadRowElements(model);
    if (stored.InBf16(offset)) {
      return ranks.pipeline->Send(stored.Bf16At(offset),
                                  elements * kBfloat16Bytes, last,
                                  kTiedHeadWeightsTag);
    }
    return ranks.pipeline->Send(stored.Float32At(offset),
                                elements * kFloatBytes, last,
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
  const int64_t elements = HeadRowElements(model);
  RETURN_IF_ERROR(
      ranks.pipeline->Receive(received.data(), elements * kFloatBytes,
                              ranks.sizes.pp - 1, kTiedHeadGradientsTag));
  const SplitBuffers stored = model.gradient_buffers();
  const int64_t offset = HeadRowsOffset(model);
  kernels::Ops& ops = model.ops();
  if (!stored.InBf16(offset)) {
    float* rows = stored.Float32At(offset);
    ops.Add(elements, rows, received.f32(), rows);
    return absl::OkStatus();
  }
  // bf16 gradient accumulation: the stored rows widened into the buffer's
  // second half, the sum rounded once.
  float* widened = received.f32() + elements;
  ops.CopyFromBf16(elements, stored.Bf16At(offset), widened);
  ops.Add(elements, widened, received.f32(), widened);
  ops.CopyToBf16(elements, widened, stored.Bf16At(offset));
  return absl::OkStatus();
}

}  // namespace plateau::engine
