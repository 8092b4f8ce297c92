// The attention block's buffers (attention_block.h) for a micro-batch, and
// its forward and backward footprints: AttentionBlockForward and
// AttentionBlockBackward allocate exactly these, in this order.
#ifndef PLATEAU_ENGINE_MODEL_ATTENTION_FOOTPRINT_H_
#define PLATEAU_ENGINE_MODEL_ATTENTION_FOOTPRINT_H_

#include <cstdint>

#include "engine/memory/footprint.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

// Rows of the float32 q, k, v product that bf16's qkv is rounded from, made
// a piece at a time so that the forward holds a bounded piece of it; and of
// the q and k product that QK-norm's backward makes again, likewise.
inline constexpr int64_t kQkvProductRows = 1024;

// Under bf16 the backward makes q, k and v's float32 gradients in this many
// pieces of the key and value heads (each with its groups' query heads; as
// many pieces as heads where there are fewer), rounding each into the bf16
// d_qkv, so that it holds about a quarter of the float32 whole: without
// grouped-query attention that whole would be the largest buffer of a
// layer's backward, three times a token's d_model. Fewer pieces would hold
// more; more would leave a piece too few heads to share among a CPU's
// threads.
inline constexpr int64_t kAttentionGradientPieces = 4;

// N tokens in B sequences of T; D = d_model, H heads; W = D + 2 * kv_heads
// * head_dim, a row of q, k and v (ModelConfig::qkv_width).
struct AttentionBuffers {
  static AttentionBuffers For(const ModelConfig& config, int64_t sequences);

  // Whether qkv is stored rounded (bf16), made from a float32 product.
  bool rounds_qkv() const { return qkv.dtype != qkv_product.dtype; }

  // RMSNorm(x), bf16 or not: the forward's until q, k and v are made, and
  // the backward's, made again (with an inverse_rms of scratch).
  BufferSpec normed;  // (N, D)     activations
  // Saved by forward for backward.
  BufferSpec inverse_rms;  // (N)        activations
  BufferSpec qkv;          // (N, W)     attention    RoundedActivationType
  BufferSpec context;      // (N, D)     attention    RoundedActivationType
  BufferSpec logsumexp;    // (B, H, T)  attention
  // The forward's own, when rounds_qkv(): a piece of the float32 product,
  // rotated, that qkv is rounded from.
  BufferSpec qkv_product;  // (min(N, kQkvProductRows), W)  attention
  // Backward's own: the branch's gradients (d_context, then d_normed), q,
  // k and v's (RoundedActivationType; when rounds_qkv() written over qkv,
  // a piece at a time, and not allocated), and when rounds_qkv() the
  // float32 piece they are made in (piece_kv_heads key and value heads, P
  // = piece_kv_heads x (heads / kv_heads + 2) x head_dim columns: their
  // dq, dk and dv; without rounding there is one piece, d_qkv itself).
  BufferSpec d_branch;     // (N, D)   activations
  BufferSpec d_qkv;        // (N, W)   attention
  BufferSpec d_qkv_piece;  // (N, P)   attention
  int64_t piece_kv_heads = 0;
  // Whether the layer's input is rounded (bf16): the forward widens it into
  // the residual, and the norms read it as it is.
  bool widens_input = false;
  // With QK-norm, backward's piece of the q and k product made again as the
  // norm's input, a piece of the heads' q and k columns:
  // (min(N, kQkvProductRows), P - piece_kv_heads x head_dim)  attention.
  BufferSpec qk_product;
  bool qk_norm = false;
};

// The footprint's handles of AttentionActivations. Forward allocates normed,
// inverse_rms, [qkv_product], qkv, [frees qkv_product], frees normed,
// allocates context, logsumexp.
struct AttentionSaved {
  FootprintSink::Handle inverse_rms = 0, qkv = 0, context = 0, logsumexp = 0;
};

void AttentionForwardFootprint(const AttentionBuffers& buffers,
                               FootprintSink& sink, AttentionSaved* saved);
// Frees what of *saved the backward frees (inverse_rms stays). Makes normed
// again (a scratch inverse_rms comes and goes); allocates d_branch, d_qkv
// (or with rounds_qkv() d_qkv_piece, d_qkv being qkv's buffer) and
// [qk_product], held through the pieces; frees the piece buffers, then the
// output, then q, k, v and d_qkv, then normed, then d_branch.
void AttentionBackwardFootprint(const AttentionBuffers& buffers,
                                FootprintSink& sink, AttentionSaved* saved);
// Frees what is left of *saved, as destroying AttentionActivations does.
void ReleaseAttentionFootprint(FootprintSink& sink, AttentionSaved* saved);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_ATTENTION_FOOTPRINT_H_
