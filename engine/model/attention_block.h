// The attention half of a transformer layer: out = x + Wo . Attn(RMSNorm(x)),
// causal multi-head attention with rotary embedding on q and k, grouped-query
// when kv_heads < heads (the heads of a group share their keys and values),
// and with QK-norm each head of q and k RMS-normalised before its rotation.
// W = qkv_width = D + 2 * kv_heads * head_dim.
#ifndef PLATEAU_ENGINE_MODEL_ATTENTION_BLOCK_H_
#define PLATEAU_ENGINE_MODEL_ATTENTION_BLOCK_H_

#include "absl/status/status.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"
#include "engine/model/linear.h"

namespace plateau::engine {

template <typename T>
struct AttentionParameters {
  T* norm = nullptr;  // (D)
  // (W, D): wq (D, D), wk and wv (kv_heads * head_dim, D)
  ProductWeight<T> wqkv{};
  ProductWeight<T> wo{};  // (D, D)
  // QK-norm's scales (head_dim each), null without it.
  T* q_norm = nullptr;
  T* k_norm = nullptr;
};

// What the backward pass reads from the forward pass (N tokens, B sequences).
// qkv and context are RoundedActivationType: under bf16, rounded once where
// they are made (q and k after rotary), and attention's float32 math reads
// those values.
// No normed input RMSNorm(x): the backward makes it again from x and
// inverse_rms, bitwise the forward's.
struct AttentionActivations {
  Tensor inverse_rms;  // (N)        activations
  Tensor qkv;          // (N, W)     attention    q and k already rotated
  Tensor context;      // (N, D)     attention    attention output, before Wo
  Tensor logsumexp;    // (B, H, T)  attention    softmax normalisers
};

// x: (N, D), the layer's input (a boundary: RoundedActivationType, which
// the block widens exactly); out: (N, D) float32. REQUIRES: out does not
// alias x.
absl::Status AttentionBlockForward(const LayerContext& context,
                                   const AttentionParameters<const float>& w,
                                   const Tensor& x, float* out,
                                   AttentionActivations* saved);

// gradient (a ResidualGradientBuffer: bf16 under bf16, the norm's part added
// and rounded once) = dout + (d block / dx)^T dout, in place: on entry the
// output's gradient dout, on return the input's. Parameter gradients accumulate
// into `grads`. Consumes *saved (the forward's on the same x), freeing each
// tensor after its last use; the branch's own gradients take one (N, D)
// buffer for the call (AttentionBuffers::d_branch), so between blocks the
// residual stream's gradient is a single buffer. Under bf16, q, k and v's
// gradients are made in float32 a piece of the heads at a time
// (kAttentionGradientPieces) and rounded into a bf16 d_qkv, written over
// the saved q, k and v as each piece is done with them: the same bits
// as the whole float32 gradient through the products, which round it alike
// (without QK-norm, whose backward's weight gradients sum the pieces in
// turn). The norm's backward reads a bf16 x as it is
// (AddBoundaryNormGradient, boundary_input.h), at the end.
absl::Status AttentionBlockBackward(const LayerContext& context,
                                    const AttentionParameters<const float>& w,
                                    const AttentionParameters<float>& grads,
                                    const Tensor& x,
                                    AttentionActivations* saved,
                                    Tensor* gradient);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_ATTENTION_BLOCK_H_
