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

// N tokens in B sequences of T; D = d_model, H heads; W = D + 2 * kv_heads
// * head_dim, a row of q, k and v (ModelConfig::qkv_width).
struct AttentionBuffers {
  static AttentionBuffers For(const ModelConfig& config, int64_t sequences);

  // Whether qkv is stored rounded (bf16), made from a float32 product.
  bool rounds_qkv() const { return qkv.dtype != qkv_product.dtype; }

  // Saved by forward for backward.
  BufferSpec normed;       // (N, D)     activations  RMSNorm(x), bf16 or not
  BufferSpec inverse_rms;  // (N)        activations
  BufferSpec qkv;          // (N, W)     attention    RoundedActivationType
  BufferSpec context;      // (N, D)     attention    RoundedActivationType
  BufferSpec logsumexp;    // (B, H, T)  attention
  // The forward's own, when rounds_qkv(): a piece of the float32 product,
  // rotated, that qkv is rounded from.
  BufferSpec qkv_product;  // (min(N, kQkvProductRows), W)  attention
  // Backward's own: the branch's gradients (d_context, then d_normed), q,
  // k and v's, and when the layer's input is rounded (bf16) that input
  // widened for the norm's backward.
  BufferSpec d_branch;       // (N, D)   activations
  BufferSpec d_qkv;          // (N, W)   attention
  BufferSpec widened_input;  // (N, D)   activations
  bool widens_input = false;
  // With QK-norm, backward's piece of the q and k product made again as the
  // norm's input: (min(N, kQkvProductRows), D + kv_width)  attention.
  BufferSpec qk_product;
  bool qk_norm = false;
};

// The footprint's handles of AttentionActivations. Forward allocates normed,
// inverse_rms, [qkv_product], qkv, [frees qkv_product], context, logsumexp.
struct AttentionSaved {
  FootprintSink::Handle normed = 0, inverse_rms = 0, qkv = 0, context = 0,
                        logsumexp = 0;
};

void AttentionForwardFootprint(const AttentionBuffers& buffers,
                               FootprintSink& sink, AttentionSaved* saved);
// Frees what of *saved the backward frees (inverse_rms stays): d_branch
// is held for the whole backward, [qk_product] allocated and freed while
// d_qkv is held, and [widened_input] allocated and freed after d_qkv is.
void AttentionBackwardFootprint(const AttentionBuffers& buffers,
                                FootprintSink& sink, AttentionSaved* saved);
// Frees what is left of *saved, as destroying AttentionActivations does.
void ReleaseAttentionFootprint(FootprintSink& sink, AttentionSaved* saved);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_ATTENTION_FOOTPRINT_H_
