#include "engine/model/attention_block.h"

#include <algorithm>

#include "common/status_macros.h"
#include "engine/model/attention_footprint.h"
#include "engine/model/boundary_input.h"
#include "engine/model/linear.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {
namespace {

kernels::AttentionShape ShapeOf(const LayerContext& context) {
  kernels::AttentionShape shape;
  shape.batch = context.sequences;
  shape.seq_len = context.config->seq_len;
  shape.heads = context.config->heads;
  shape.kv_heads = context.config->kv_heads;
  shape.head_dim = context.config->head_dim();
  return shape;
}

// Where k and v start in a row of q, k and v (ModelConfig::qkv_width).
int64_t KeyColumn(const ModelConfig& config) { return config.d_model; }
int64_t ValueColumn(const ModelConfig& config) {
  return config.d_model + config.kv_width();
}

// QK-norm over `rows` rows of q and k (stride qkv_width) in place.
void QkNormForward(const LayerContext& context,
                   const AttentionParameters<const float>& w, int64_t rows,
                   float* qkv) {
  const ModelConfig& config = *context.config;
  const int64_t qkv_width = config.qkv_width();
  context.ops->HeadRmsNormForward(rows, config.heads, config.head_dim(),
                                  qkv_width, w.q_norm, config.rms_epsilon, qkv);
  context.ops->HeadRmsNormForward(rows, config.kv_heads, config.head_dim(),
                                  qkv_width, w.k_norm, config.rms_epsilon,
                                  qkv + KeyColumn(config));
}

// QK-norm's backward over d_qkv's q and k columns, in place. Its input, the
// q and k product before the norm, is made again a piece of rows at a time
// from the saved normed input (one product of D + kv_width columns), so
// that the forward keeps nothing more for it.
absl::Status QkNormBackward(const LayerContext& context,
                            const AttentionBuffers& buffers,
                            const AttentionParameters<const float>& w,
                            const AttentionParameters<float>& grads,
                            const Tensor& normed, float* d_qkv) {
  const ModelConfig& config = *context.config;
  kernels::Ops& ops = *context.ops;
  const int64_t n = context.tokens();
  const int64_t qkv_width = config.qkv_width();
  const int64_t qk_width = buffers.qk_product.shape[1];
  ASSIGN_OR_RETURN(Tensor qk_product, context.Allocate(buffers.qk_product));
  const int64_t piece_rows = buffers.qk_product.shape[0];
  for (int64_t first_row = 0; first_row < n; first_row += piece_rows) {
    const int64_t rows = std::min(piece_rows, n - first_row);
    float* product = qk_product.f32();
    ops.Gemm(LinearForwardArgs(rows, config.d_model, qk_width,
                               RowsOf(normed, first_row), w.wqkv, product,
                               /*accumulate=*/false, config.matmul_precision));
    float* d_rows = d_qkv + first_row * qkv_width;
    ops.HeadRmsNormBackward(rows, config.heads, config.head_dim(), product,
                            qk_width, w.q_norm, config.rms_epsilon, qkv_width,
                            d_rows, grads.q_norm);
    ops.HeadRmsNormBackward(rows, config.kv_heads, config.head_dim(),
                            product + KeyColumn(config), qk_width, w.k_norm,
                            config.rms_epsilon, qkv_width,
                            d_rows + KeyColumn(config), grads.k_norm);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionBlockForward(const LayerContext& context,
                                   const AttentionParameters<const float>& w,
                                   const Tensor& x, float* out,
                                   AttentionActivations* saved) {
  const ModelConfig& config = *context.config;
  kernels::Ops& ops = *context.ops;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const int64_t qkv_width = config.qkv_width();
  const int64_t key_column = KeyColumn(config);
  const int64_t value_column = ValueColumn(config);
  const AttentionBuffers buffers =
      AttentionBuffers::For(config, context.sequences);
  RETURN_IF_ERROR(CheckBoundaryInput(config, x, "the attention block"));
  ASSIGN_OR_RETURN(saved->normed, context.Allocate(buffers.normed));
  ASSIGN_OR_RETURN(saved->inverse_rms, context.Allocate(buffers.inverse_rms));
  Tensor qkv_product;
  if (buffers.rounds_qkv()) {
    ASSIGN_OR_RETURN(qkv_product, context.Allocate(buffers.qkv_product));
  }
  ASSIGN_OR_RETURN(saved->qkv, context.Allocate(buffers.qkv));

  // out = x, in float32 (the residual), whose norm the block takes.
  if (buffers.widens_input) {
    ops.CopyFromBf16(n * d, x.bf16(), out);
  } else {
    ops.Copy(n * d, x.f32(), out);
  }
  RmsNormForwardInto(context, out, w.norm, &saved->normed, &saved->inverse_rms);
  // qkv = normed . [wq; wk; wv]^T      (N, qkv_width), q and k normed
  // with QK-norm, then rotated (adjacent columns: one rotary call over
  // heads + kv_heads heads). Under
  // bf16 a piece of rows at a time, each rounded once made.
  const int64_t piece_rows =
      buffers.rounds_qkv() ? buffers.qkv_product.shape[0] : n;
  for (int64_t first_row = 0; first_row < n; first_row += piece_rows) {
    const int64_t rows = std::min(piece_rows, n - first_row);
    float* product = buffers.rounds_qkv()
                         ? qkv_product.f32()
                         : saved->qkv.f32() + first_row * qkv_width;
    ops.Gemm(LinearForwardArgs(
        rows, d, qkv_width, RowsOf(saved->normed, first_row), w.wqkv, product,
        /*accumulate=*/false, config.matmul_precision));
    if (config.qk_norm) QkNormForward(context, w, rows, product);
    ops.RotaryForward(rows, first_row, config.seq_len,
                      config.heads + config.kv_heads, config.head_dim(),
                      qkv_width, config.rope_theta, product);
    if (buffers.rounds_qkv()) {
      ops.CopyToBf16(rows * qkv_width, product,
                     saved->qkv.bf16() + first_row * qkv_width);
    }
  }
  qkv_product.Reset();
  ASSIGN_OR_RETURN(saved->context, context.Allocate(buffers.context));
  ASSIGN_OR_RETURN(saved->logsumexp, context.Allocate(buffers.logsumexp));
  if (buffers.rounds_qkv()) {
    const uint16_t* q = saved->qkv.bf16();
    ops.AttentionForwardBf16(ShapeOf(context), q, q + key_column,
                             q + value_column, qkv_width, saved->context.bf16(),
                             d, saved->logsumexp.f32());
  } else {
    const float* q = saved->qkv.f32();
    ops.AttentionForward(ShapeOf(context), q, q + key_column, q + value_column,
                         qkv_width, saved->context.f32(), d,
                         saved->logsumexp.f32());
  }
  // out = x + context . wo^T
  ops.Gemm(LinearForwardArgs(n, d, d, RowsOf(saved->context), w.wo, out,
                             /*accumulate=*/true, config.matmul_precision));
  return absl::OkStatus();
}

absl::Status AttentionBlockBackward(const LayerContext& context,
                                    const AttentionParameters<const float>& w,
                                    const AttentionParameters<float>& grads,
                                    const Tensor& x,
                                    AttentionActivations* saved,
                                    float* gradient) {
  const ModelConfig& config = *context.config;
  kernels::Ops& ops = *context.ops;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const int64_t qkv_width = config.qkv_width();
  const int64_t key_column = KeyColumn(config);
  const int64_t value_column = ValueColumn(config);
  const AttentionBuffers buffers =
      AttentionBuffers::For(config, context.sequences);
  RETURN_IF_ERROR(CheckBoundaryInput(config, x, "the attention block"));

  // The residual passes the gradient straight through, so it stays where
  // it is and the norm adds its part at the end; the branch's gradients
  // (d_context, then d_normed) take a buffer of their own.
  ASSIGN_OR_RETURN(Tensor d_branch, context.Allocate(buffers.d_branch));
  // Output projection: d_wo += gradient^T . context; d_context = gradient .
  // wo.
  ops.Gemm(LinearWeightGradArgs(n, d, d, gradient, RowsOf(saved->context),
                                grads.wo, config.matmul_precision));
  float* d_context = d_branch.f32();
  ops.Gemm(LinearInputGradArgs(n, d, d, gradient, w.wo, d_context,
                               /*accumulate=*/false, config.matmul_precision));

  ASSIGN_OR_RETURN(Tensor d_qkv, context.Allocate(buffers.d_qkv));
  float* dq = d_qkv.f32();
  if (buffers.rounds_qkv()) {
    const uint16_t* q = saved->qkv.bf16();
    ops.AttentionBackwardBf16(
        ShapeOf(context), q, q + key_column, q + value_column, qkv_width,
        saved->context.bf16(), d_context, d, saved->logsumexp.f32(), dq,
        dq + key_column, dq + value_column);
  } else {
    const float* q = saved->qkv.f32();
    ops.AttentionBackward(ShapeOf(context), q, q + key_column, q + value_column,
                          qkv_width, saved->context.f32(), d_context, d,
                          saved->logsumexp.f32(), dq, dq + key_column,
                          dq + value_column);
  }
  saved->context.Reset();
  saved->logsumexp.Reset();
  saved->qkv.Reset();
  ops.RotaryBackward(n, /*first_row=*/0, config.seq_len,
                     config.heads + config.kv_heads, config.head_dim(),
                     qkv_width, config.rope_theta, dq);
  if (config.qk_norm) {
    RETURN_IF_ERROR(
        QkNormBackward(context, buffers, w, grads, saved->normed, dq));
  }

  // QKV projection: d_normed = d_qkv . wqkv (over d_context, done with);
  // d_wqkv += d_qkv^T . normed.
  float* d_normed = d_branch.f32();
  ops.Gemm(LinearInputGradArgs(n, d, qkv_width, dq, w.wqkv, d_normed,
                               /*accumulate=*/false, config.matmul_precision));
  ops.Gemm(LinearWeightGradArgs(n, d, qkv_width, dq, RowsOf(saved->normed),
                                grads.wqkv, config.matmul_precision));
  d_qkv.Reset();
  saved->normed.Reset();

  Tensor widened;
  ASSIGN_OR_RETURN(const float* x_values,
                   BoundaryValues(context, x, buffers.widened_input, &widened));
  ops.RmsNormBackward(n, d, x_values, w.norm, saved->inverse_rms.f32(),
                      d_normed, gradient, grads.norm);
  return absl::OkStatus();
}

}  // namespace plateau::engine
