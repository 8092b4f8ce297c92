// The top of the model: final RMSNorm, vocabulary projection (lm_head) and
// the mean next-token cross-entropy, in one of two forms:
// - plain (config.vocab_block == 0): the (N, vocab) logits are materialised
//   in forward and kept for backward, charged to vocab_projection;
// - Ring-DTP (vocab_block > 0): logits exist one block of (N, vocab_block)
//   at a time. Forward folds each block into every token's running
//   logsumexp and target logit (an online softmax); backward recomputes each
//   block, turns it into its gradient in place and folds it into the input
//   and lm_head gradients. With the lm_head split over the expert-parallel
//   ranks (ModelShard::head_sharded) the P ranks form a ring: in P steps
//   every rank's tokens meet every vocabulary shard, the weight shards or
//   the token blocks (with their running state and gradient) moving one
//   rank on per step, whichever is fewer bytes; with one rank it is the
//   chunked single-rank form. Peak: a few blocks and the ring's two
//   buffers, instead of two (N, vocab) tensors' lifetimes. Same loss and
//   gradients up to float rounding (sums run over blocks in another order).
#ifndef PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_H_
#define PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_H_

#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"
#include "engine/model/parameter_layout.h"

namespace plateau::engine {

template <typename T>
struct OutputHeadParameters {
  T* norm = nullptr;     // (D)
  T* lm_head = nullptr;  // (V, D)
};

// Pointers to the head's parameters in a flat buffer laid out by `layout`
// (weights, gradients, or any other per-parameter buffer).
template <typename T>
OutputHeadParameters<T> OutputHeadParametersAt(const ParameterLayout& layout,
                                               T* base) {
  return {base + layout.final_norm_offset(), base + layout.lm_head_offset()};
}

struct OutputHeadActivations {
  Tensor normed;       // (N, D)  activations
  Tensor inverse_rms;  // (N)     activations
  Tensor logits;       // (N, V)  vocab_projection; plain form only
  Tensor logsumexp;    // (N)     vocab_projection
};

// Returns the mean cross-entropy of predicting targets (N, int32) from x
// over this micro-batch.
absl::StatusOr<double> OutputHeadForward(
    const LayerContext& context, const OutputHeadParameters<const float>& w,
    const float* x, const Tensor& targets, OutputHeadActivations* saved);

// dx = gradient w.r.t. x of the cross-entropy weighted by
// loss_weights.cross_entropy_per_token (written); parameter gradients
// accumulate. Consumes saved->logits (turned into their gradient) in the
// plain form.
absl::Status OutputHeadBackward(const LayerContext& context,
                                const OutputHeadParameters<const float>& w,
                                const OutputHeadParameters<float>& grads,
                                const float* x, const Tensor& targets,
                                OutputHeadActivations* saved, float* dx);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_H_
