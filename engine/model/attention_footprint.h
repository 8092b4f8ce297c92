// The attention block's buffers (attention_block.h) for a micro-batch, and
// its forward and backward footprints: AttentionBlockForward and
// AttentionBlockBackward allocate exactly these, in this order.
#ifndef PLATEAU_ENGINE_MODEL_ATTENTION_FOOTPRINT_H_
#define PLATEAU_ENGINE_MODEL_ATTENTION_FOOTPRINT_H_

#include <cstdint>

#include "engine/memory/footprint.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

// N tokens in B sequences of T; D = d_model, H heads.
struct AttentionBuffers {
  static AttentionBuffers For(const ModelConfig& config, int64_t sequences);

  // Saved by forward for backward.
  BufferSpec normed;       // (N, D)     activations  RMSNorm(x), bf16 or not
  BufferSpec inverse_rms;  // (N)        activations
  BufferSpec qkv;          // (N, 3D)    attention
  BufferSpec context;      // (N, D)     attention
  BufferSpec logsumexp;    // (B, H, T)  attention
  // Backward's own.
  BufferSpec d_qkv;  // (N, 3D)  attention
};

// The footprint's handles of AttentionActivations.
struct AttentionSaved {
  FootprintSink::Handle normed = 0, inverse_rms = 0, qkv = 0, context = 0,
                        logsumexp = 0;
};

void AttentionForwardFootprint(const AttentionBuffers& buffers,
                               FootprintSink& sink, AttentionSaved* saved);
// Frees what of *saved the backward frees (inverse_rms stays).
void AttentionBackwardFootprint(const AttentionBuffers& buffers,
                                FootprintSink& sink, AttentionSaved* saved);
// Frees what is left of *saved, as destroying AttentionActivations does.
void ReleaseAttentionFootprint(FootprintSink& sink, AttentionSaved* saved);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_ATTENTION_FOOTPRINT_H_
