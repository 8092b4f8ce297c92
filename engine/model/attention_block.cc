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

// A piece of the attention's heads for its backward: key and value heads
// [first, first + count) and their groups' query heads. Its gradients are
// rows of `width` floats, [dq | dk | dv] (the whole piece's are d_qkv's
// rows); each segment maps a part of them to its columns of q, k and v,
// which are its rows of wqkv.
struct HeadPiece {
  struct Segment {
    int64_t qkv_column = 0;    // in a row of q, k and v, and a row of wqkv
    int64_t piece_column = 0;  // in a row of the piece's gradients
    int64_t columns = 0;
  };
  int64_t first_query_head = 0;
  int64_t query_heads = 0;
  int64_t key_value_heads = 0;
  int64_t width = 0;
  Segment q, k, v;
};

HeadPiece PieceOf(const ModelConfig& config, int64_t first, int64_t count) {
  const int64_t head_dim = config.head_dim();
  const int64_t group = config.heads / config.kv_heads;
  HeadPiece piece;
  piece.first_query_head = first * group;
  piece.query_heads = count * group;
  piece.key_value_heads = count;
  const int64_t query_columns = piece.query_heads * head_dim;
  const int64_t key_value_columns = count * head_dim;
  piece.q = {piece.first_query_head * head_dim, 0, query_columns};
  piece.k = {KeyColumn(config) + first * head_dim, query_columns,
             key_value_columns};
  piece.v = {ValueColumn(config) + first * head_dim,
             query_columns + key_value_columns, key_value_columns};
  piece.width = query_columns + 2 * key_value_columns;
  return piece;
}

// QK-norm's backward over the piece's q and k gradients, in place. Its
// input, the q and k product before the norm, is made again a piece of
// rows at a time from the normed input (the piece's rows of wqkv), so that
// the forward keeps nothing more for it.
void QkNormBackward(const LayerContext& context,
                    const AttentionParameters<const float>& w,
                    const AttentionParameters<float>& grads,
                    const Tensor& normed, const HeadPiece& piece,
                    Tensor& qk_product, float* gradients) {
  const ModelConfig& config = *context.config;
  kernels::Ops& ops = *context.ops;
  const int64_t n = context.tokens();
  const int64_t qk_width = piece.q.columns + piece.k.columns;
  const int64_t piece_rows = qk_product.dim(0);
  for (int64_t first_row = 0; first_row < n; first_row += piece_rows) {
    const int64_t rows = std::min(piece_rows, n - first_row);
    float* product = qk_product.f32();
    for (const HeadPiece::Segment& segment : {piece.q, piece.k}) {
      kernels::GemmArgs args = LinearForwardArgs(
          rows, config.d_model, segment.columns, RowsOf(normed, first_row),
          w.wqkv.At(segment.qkv_column * config.d_model),
          product + segment.piece_column, /*accumulate=*/false,
          config.matmul_precision);
      args.ldc = qk_width;
      ops.Gemm(args);
    }
    float* d_rows = gradients + first_row * piece.width;
    ops.HeadRmsNormBackward(rows, piece.query_heads, config.head_dim(), product,
                            qk_width, w.q_norm, config.rms_epsilon, piece.width,
                            d_rows, grads.q_norm);
    ops.HeadRmsNormBackward(rows, piece.key_value_heads, config.head_dim(),
                            product + piece.k.piece_column, qk_width, w.k_norm,
                            config.rms_epsilon, piece.width,
                            d_rows + piece.k.piece_column, grads.k_norm);
  }
}

// The block's normed input, RMSNorm(x) in ProductInputType, made again from
// x: bitwise the forward's, which normed x's widened values. The statistics
// it makes again are scratch.
absl::StatusOr<Tensor> NormedInputAgain(const LayerContext& context,
                                        const float* norm_weight,
                                        const Tensor& x,
                                        const AttentionBuffers& buffers) {
  ASSIGN_OR_RETURN(Tensor normed, context.Allocate(buffers.normed));
  ASSIGN_OR_RETURN(Tensor inverse_rms, context.Allocate(buffers.inverse_rms));
  NormBoundary(context, x, norm_weight, &normed, &inverse_rms);
  return normed;
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
  ASSIGN_OR_RETURN(Tensor normed, context.Allocate(buffers.normed));
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
  RmsNormForwardInto(context, out, w.norm, &normed, &saved->inverse_rms);
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
    ops.Gemm(LinearForwardArgs(rows, d, qkv_width, RowsOf(normed, first_row),
                               w.wqkv, product,
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
  normed.Reset();
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
                                    Tensor* gradient) {
  const ModelConfig& config = *context.config;
  kernels::Ops& ops = *context.ops;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const int64_t qkv_width = config.qkv_width();
  const AttentionBuffers buffers =
      AttentionBuffers::For(config, context.sequences);
  RETURN_IF_ERROR(CheckBoundaryInput(config, x, "the attention block"));
  ASSIGN_OR_RETURN(Tensor normed,
                   NormedInputAgain(context, w.norm, x, buffers));

  // The residual passes the gradient straight through, so it stays where
  // it is and the norm adds its part at the end; the branch's gradients
  // (d_context, then d_normed) take a buffer of their own.
  ASSIGN_OR_RETURN(Tensor d_branch, context.Allocate(buffers.d_branch));
  // Output projection: d_wo += gradient^T . context; d_context = gradient .
  // wo.
  ops.Gemm(LinearWeightGradArgs(n, d, d, RowsOf(*gradient),
                                RowsOf(saved->context), grads.wo,
                                config.matmul_precision));
  float* d_context = d_branch.f32();
  ops.Gemm(LinearInputGradArgs(n, d, d, RowsOf(*gradient), w.wo, d_context,
                               /*accumulate=*/false, config.matmul_precision));

  // q, k and v's gradients, d_qkv, rotated back and through QK-norm's
  // backward: float32, or under bf16 rounded once made, as the products
  // that read them would round them. Under bf16 they are made a piece of
  // the key and value heads at a time (AttentionBuffers::piece_kv_heads) in
  // a float32 piece, so that the whole float32 gradient is never held, then
  // rounded over the piece's own columns of the saved q, k and v, which no
  // other piece reads: d_qkv takes their buffer. In float32 the one piece
  // is d_qkv, made while q, k and v are read.
  Tensor d_qkv;
  Tensor piece_gradients;
  if (buffers.rounds_qkv()) {
    ASSIGN_OR_RETURN(piece_gradients, context.Allocate(buffers.d_qkv_piece));
  } else {
    ASSIGN_OR_RETURN(d_qkv, context.Allocate(buffers.d_qkv));
  }
  Tensor qk_product;
  if (buffers.qk_norm) {
    ASSIGN_OR_RETURN(qk_product, context.Allocate(buffers.qk_product));
  }
  for (int64_t first = 0; first < config.kv_heads;
       first += buffers.piece_kv_heads) {
    const HeadPiece piece =
        PieceOf(config, first,
                std::min(buffers.piece_kv_heads, config.kv_heads - first));
    kernels::AttentionShape shape = ShapeOf(context);
    shape.heads = piece.query_heads;
    shape.kv_heads = piece.key_value_heads;
    shape.layer_heads = config.heads;
    shape.gradient_stride = piece.width;
    const float* logsumexp =
        saved->logsumexp.f32() + piece.first_query_head * config.seq_len;
    float* dq = buffers.rounds_qkv() ? piece_gradients.f32() : d_qkv.f32();
    float* dk = dq + piece.k.piece_column;
    float* dv = dq + piece.v.piece_column;
    if (buffers.rounds_qkv()) {
      const uint16_t* qkv = saved->qkv.bf16();
      ops.AttentionBackwardBf16(
          shape, qkv + piece.q.qkv_column, qkv + piece.k.qkv_column,
          qkv + piece.v.qkv_column, qkv_width,
          saved->context.bf16() + piece.q.qkv_column,
          d_context + piece.q.qkv_column, d, logsumexp, dq, dk, dv);
    } else {
      const float* qkv = saved->qkv.f32();
      ops.AttentionBackward(
          shape, qkv + piece.q.qkv_column, qkv + piece.k.qkv_column,
          qkv + piece.v.qkv_column, qkv_width,
          saved->context.f32() + piece.q.qkv_column,
          d_context + piece.q.qkv_column, d, logsumexp, dq, dk, dv);
    }
    ops.RotaryBackward(n, /*first_row=*/0, config.seq_len,
                       piece.query_heads + piece.key_value_heads,
                       config.head_dim(), piece.width, config.rope_theta, dq);
    if (buffers.qk_norm) {
      QkNormBackward(context, w, grads, normed, piece, qk_product, dq);
    }
    if (buffers.rounds_qkv()) {
      for (const HeadPiece::Segment& segment : {piece.q, piece.k, piece.v}) {
        ops.CopyMatrixToBf16(n, segment.columns, dq + segment.piece_column,
                             piece.width,
                             saved->qkv.bf16() + segment.qkv_column, qkv_width);
      }
    }
  }
  qk_product.Reset();
  piece_gradients.Reset();
  saved->context.Reset();
  saved->logsumexp.Reset();
  if (buffers.rounds_qkv()) {
    d_qkv = std::move(saved->qkv);
  } else {
    saved->qkv.Reset();
  }

  // QKV projection: d_normed = d_qkv . wqkv (over d_context, done with);
  // d_wqkv += d_qkv^T . normed.
  float* d_normed = d_branch.f32();
  ops.Gemm(LinearInputGradArgs(n, d, qkv_width, RowsOf(d_qkv), w.wqkv, d_normed,
                               /*accumulate=*/false, config.matmul_precision));
  ops.Gemm(LinearWeightGradArgs(n, d, qkv_width, RowsOf(d_qkv), RowsOf(normed),
                                grads.wqkv, config.matmul_precision));
  d_qkv.Reset();
  normed.Reset();

  AddBoundaryNormGradient(context, x, w.norm, saved->inverse_rms.f32(),
                          d_normed, gradient, grads.norm);
  return absl::OkStatus();
}

}  // namespace plateau::engine
