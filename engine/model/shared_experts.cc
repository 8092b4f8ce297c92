#include "engine/model/shared_experts.h"

#include <algorithm>

#include "common/status_macros.h"
#include "engine/model/linear.h"
#include "engine/model/moe_footprint.h"

namespace plateau::engine {
namespace {

// gate = x w1^T and up = x w3^T for `rows` tokens of x, as one batch.
void GateAndUp(const LayerContext& context,
               const SharedExpertParameters<const float>& w, int64_t rows,
               LinearOperand x, float* gate, float* up) {
  const ModelConfig& config = *context.config;
  const int64_t d = config.d_model;
  const int64_t h = config.shared_hidden();
  const kernels::GemmArgs products[] = {
      LinearForwardArgs(rows, d, h, x, w.w1, gate,
                        /*accumulate=*/false, config.matmul_precision),
      LinearForwardArgs(rows, d, h, x, w.w3, up,
                        /*accumulate=*/false, config.matmul_precision)};
  context.ops->GroupedGemm(products);
}

}  // namespace

absl::Status SharedExpertsForward(const LayerContext& context,
                                  const SharedExpertParameters<const float>& w,
                                  const Tensor& normed, float* out) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const int64_t h = config.shared_hidden();
  const SharedExpertBuffers buffers = SharedExpertBuffers::For(config, n);
  ASSIGN_OR_RETURN(Tensor gate, context.Allocate(buffers.gate));
  ASSIGN_OR_RETURN(Tensor up, context.Allocate(buffers.up));
  ASSIGN_OR_RETURN(Tensor hidden, context.Allocate(buffers.hidden));
  for (int64_t first = 0; first < n; first += kSharedExpertPieceTokens) {
    const int64_t rows = std::min(n - first, kSharedExpertPieceTokens);
    GateAndUp(context, w, rows, RowsOf(normed, first), gate.f32(), up.f32());
    context.ops->SwiGluForward(rows * h, gate.f32(), up.f32(), hidden.f32());
    context.ops->Gemm(LinearForwardArgs(
        rows, h, d, FloatOperand(hidden.f32()), w.w2, out + first * d,
        /*accumulate=*/true, config.matmul_precision));
  }
  return absl::OkStatus();
}

absl::Status SharedExpertsBackward(const LayerContext& context,
                                   const SharedExpertParameters<const float>& w,
                                   const SharedExpertParameters<float>& grads,
                                   const NormInput& normed, const Tensor& dout,
                                   float* d_normed) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const int64_t h = config.shared_hidden();
  const kernels::GemmPrecision precision = config.matmul_precision;
  const SharedExpertBuffers buffers = SharedExpertBuffers::For(config, n);
  ASSIGN_OR_RETURN(Tensor gate, context.Allocate(buffers.gate));
  ASSIGN_OR_RETURN(Tensor up, context.Allocate(buffers.up));
  ASSIGN_OR_RETURN(Tensor hidden, context.Allocate(buffers.hidden));
  ASSIGN_OR_RETURN(Tensor d_hidden, context.Allocate(buffers.d_hidden));
  ASSIGN_OR_RETURN(Tensor d_up, context.Allocate(buffers.d_up));
  ASSIGN_OR_RETURN(Tensor piece, context.Allocate(buffers.normed));
  ASSIGN_OR_RETURN(Tensor piece_inverse_rms,
                   context.Allocate(buffers.inverse_rms));
  // Once w2's weight gradient has read hidden, its buffer takes d_gate.
  float* d_gate = hidden.f32();
  for (int64_t first = 0; first < n; first += kSharedExpertPieceTokens) {
    const int64_t rows = std::min(n - first, kSharedExpertPieceTokens);
    NormRowsAgain(context, normed, first, rows, piece.f32(),
                  piece_inverse_rms.f32());
    const LinearOperand x = FloatOperand(piece.f32());
    const LinearOperand dy = RowsOf(dout, first);
    float* dx = d_normed + first * d;
    // The forward's piece again.
    GateAndUp(context, w, rows, x, gate.f32(), up.f32());
    context.ops->SwiGluForward(rows * h, gate.f32(), up.f32(), hidden.f32());
    // Through w2: d_hidden = dy w2; d_w2 += dy^T hidden.
    const kernels::GemmArgs through_w2[] = {
        LinearInputGradArgs(rows, h, d, dy, w.w2, d_hidden.f32(),
                            /*accumulate=*/false, precision),
        LinearWeightGradArgs(rows, h, d, dy, FloatOperand(hidden.f32()),
                             grads.w2, precision)};
    context.ops->GroupedGemm(through_w2);
    context.ops->SwiGluBackward(rows * h, gate.f32(), up.f32(), d_hidden.f32(),
                                d_gate, d_up.f32());
    // Through w1 and w3: dx += d_gate w1 + d_up w3, and their weight
    // gradients. The two input-gradient products write the same rows, so
    // the second runs in a batch of its own.
    const kernels::GemmArgs through_w1_w3[] = {
        LinearInputGradArgs(rows, d, h, d_gate, w.w1, dx,
                            /*accumulate=*/true, precision),
        LinearWeightGradArgs(rows, d, h, d_gate, x, grads.w1, precision),
        LinearWeightGradArgs(rows, d, h, d_up.f32(), x, grads.w3, precision)};
    context.ops->GroupedGemm(through_w1_w3);
    context.ops->Gemm(LinearInputGradArgs(rows, d, h, d_up.f32(), w.w3, dx,
                                          /*accumulate=*/true, precision));
  }
  return absl::OkStatus();
}

}  // namespace plateau::engine
