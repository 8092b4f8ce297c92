// The RMSNorm at the start of a block: written in the element type the
// normed tensor was made with where products alone read it (attention's,
// the head's: ProductInputType, model_config.h), its statistics in float32
// either way; and what the MoE block's backward keeps of its normed input
// instead of the tensor itself (NormInput), from which it makes the rows it
// reads again, bitwise the forward's; and the norm's backward into the
// residual stream's gradient.
#ifndef PLATEAU_ENGINE_MODEL_RMS_NORM_H_
#define PLATEAU_ENGINE_MODEL_RMS_NORM_H_

#include <algorithm>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "engine/memory/footprint.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"

namespace plateau::engine {

// normed (N, D) = RMSNorm(x) . weight; inverse_rms (N) for the backward.
inline void RmsNormForwardInto(const LayerContext& context, const float* x,
                               const float* weight, Tensor* normed,
                               Tensor* inverse_rms) {
  const ModelConfig& config = *context.config;
  if (normed->dtype() == DType::kBfloat16) {
    context.ops->RmsNormForwardToBf16(context.tokens(), config.d_model, x,
                                      weight, config.rms_epsilon,
                                      normed->bf16(), inverse_rms->f32());
    return;
  }
  context.ops->RmsNormForward(context.tokens(), config.d_model, x, weight,
                              config.rms_epsilon, normed->f32(),
                              inverse_rms->f32());
}

// The residual stream's gradient (ResidualGradientBuffer, N x D, updated in
// place) += the norm's input gradient from d_normed (N, D); dweight +=. Into
// a bf16 gradient the sum is rounded once.
inline void AddNormGradient(const LayerContext& context, const float* x,
                            const float* weight, const float* inverse_rms,
                            const float* d_normed, Tensor* gradient,
                            float* dweight) {
  const int64_t n = context.tokens();
  const int64_t d = context.config->d_model;
  if (gradient->dtype() == DType::kBfloat16) {
    context.ops->RmsNormBackwardToBf16(n, d, x, weight, inverse_rms, d_normed,
                                       gradient->bf16(), dweight);
    return;
  }
  context.ops->RmsNormBackward(n, d, x, weight, inverse_rms, d_normed,
                               gradient->f32(), dweight);
}

// A normed input RMSNorm(x) . weight by its parts: the norm's input, its
// saved statistics and its weight.
struct NormInput {
  const float* x = nullptr;            // (N, D)
  const float* inverse_rms = nullptr;  // (N)
  const float* weight = nullptr;       // (D)
};

// normed (rows, D) = rows [first, first + rows) of RMSNorm(input.x) .
// weight, bitwise the forward's; inverse_rms (rows) is scratch.
inline void NormRowsAgain(const LayerContext& context, const NormInput& input,
                          int64_t first, int64_t rows, float* normed,
                          float* inverse_rms) {
  const ModelConfig& config = *context.config;
  context.ops->RmsNormForward(rows, config.d_model,
                              input.x + first * config.d_model, input.weight,
                              config.rms_epsilon, normed, inverse_rms);
}

// Calls use(first, rows, normed) over the rows of RMSNorm(input.x) . weight
// made again a piece at a time, in order: `piece` (float32, its first
// dimension the rows of a piece) holds them, `piece_inverse_rms` is
// scratch. Both are allocated for the call.
inline absl::Status ForEachNormedPiece(
    const LayerContext& context, const NormInput& input,
    const BufferSpec& piece, const BufferSpec& piece_inverse_rms,
    const std::function<void(int64_t first, int64_t rows, const float* normed)>&
        use) {
  const int64_t n = context.tokens();
  const int64_t piece_rows = piece.shape[0];
  ASSIGN_OR_RETURN(Tensor rows_made, context.Allocate(piece));
  ASSIGN_OR_RETURN(Tensor scratch, context.Allocate(piece_inverse_rms));
  for (int64_t first = 0; first < n; first += piece_rows) {
    const int64_t rows = std::min(n - first, piece_rows);
    NormRowsAgain(context, input, first, rows, rows_made.f32(), scratch.f32());
    use(first, rows, rows_made.f32());
  }
  return absl::OkStatus();
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_RMS_NORM_H_
