// Ring-DTP (docs/ARCHITECTURE.md section 2), the head strategy for
// config.vocab_block > 0: the logits exist one block of (N, vocab_block)
// at a time. Forward folds each block into every token's running logsumexp
// and target logit (an online softmax); backward recomputes each block,
// turns it into its gradient in place and folds it into the input and
// lm_head gradients. With the lm_head split over the expert-parallel ranks
// (ModelShard::head_sharded) the P ranks form a ring: in P steps every
// rank's tokens meet every vocabulary shard, the weight shards or the token
// blocks (with their running state and gradient) moving one rank on per
// step, whichever is fewer bytes; with one rank it is the chunked
// single-rank form. Peak: a few blocks and the ring's two buffers, instead
// of two (N, vocab) tensors' lifetimes. Same loss and gradients as the
// plain head up to float rounding (sums run over blocks in another order).
// Every rank's loss weights must be the same (the training step's are).
#ifndef PLATEAU_ENGINE_MODEL_RING_DTP_HEAD_H_
#define PLATEAU_ENGINE_MODEL_RING_DTP_HEAD_H_

#include "engine/model/head_strategy.h"

namespace plateau::engine {

class RingDtpHead final : public HeadStrategy {
 public:
  absl::StatusOr<double> Forward(const LayerContext& context,
                                 const OutputHeadParameters<const float>& w,
                                 const Tensor& targets,
                                 OutputHeadActivations* saved) const override;
  absl::Status Backward(const LayerContext& context,
                        const OutputHeadParameters<const float>& w,
                        const OutputHeadParameters<float>& grads,
                        const Tensor& targets, OutputHeadActivations* saved,
                        float* d_normed) const override;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_RING_DTP_HEAD_H_
