// How the output head goes from its normed hidden states to the loss and
// back: project onto the vocabulary and score the targets. Two forms, one
// chosen per model from the config (HeadStrategyFor):
// - plain (config.vocab_block == 0, output_head.cc): the (N, vocab) logits
//   are materialised in forward and kept for backward;
// - Ring-DTP (vocab_block > 0, ring_dtp_head.h): the logits exist a block
//   at a time, over a ring of the expert ranks when the lm_head is sharded.
#ifndef PLATEAU_ENGINE_MODEL_HEAD_STRATEGY_H_
#define PLATEAU_ENGINE_MODEL_HEAD_STRATEGY_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"
#include "engine/model/linear.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

template <typename T>
struct OutputHeadParameters {
  T* norm = nullptr;           // (D)
  ProductWeight<T> lm_head{};  // (V, D), or this rank's rows of it
};

struct OutputHeadActivations {
  Tensor normed;       // (N, D)  activations
  Tensor inverse_rms;  // (N)     activations
  Tensor logits;       // (N, V)  vocab_projection; plain form only
  Tensor logsumexp;    // (N)     vocab_projection
};

class HeadStrategy {
 public:
  virtual ~HeadStrategy() = default;

  // From saved->normed, fills saved->logsumexp (the plain form also keeps
  // saved->logits) and returns the micro-batch's mean cross-entropy of
  // `targets` (N, int32).
  virtual absl::StatusOr<double> Forward(
      const LayerContext& context, const OutputHeadParameters<const float>& w,
      const Tensor& targets, OutputHeadActivations* saved) const = 0;
  // Writes d_normed (N, D), the gradient of the cross-entropy weighted by
  // loss_weights.cross_entropy_per_token, and adds the lm_head's.
  virtual absl::Status Backward(const LayerContext& context,
                                const OutputHeadParameters<const float>& w,
                                const OutputHeadParameters<float>& grads,
                                const Tensor& targets,
                                OutputHeadActivations* saved,
                                float* d_normed) const = 0;
};

// The plain head without a vocab_block, Ring-DTP with one.
const HeadStrategy& HeadStrategyFor(const ModelConfig& config);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_HEAD_STRATEGY_H_
