// One training step of one rank, in the order it runs:
//   1. Forward and backward of the rank's micro-batches in the 1F1B order
//      (PipeDream-Flush; Megatron-Core's schedule without interleaving):
//      stage s of P first runs min(P - s - 1, M) forwards, then alternates
//      one forward with one backward, then finishes the backwards, so at
//      most P - s micro-batches are in flight. Every micro-batch of every
//      rank is weighted so that the step's loss is the mean over the whole
//      batch (see LossWeights).
//   2. With tied embeddings over stages, the last stage's head gradient
//      added to the first stage's table (tied_head.h); gradients summed
//      over their replicas; this rank keeps its ZeRO-1 shards (ZeroShards).
//   3. One all-reduce over the world of the loss, the expert load and the
//      squared norm of the owned gradients.
//   4. Clipping by the global norm, the optimizer update of the owned
//      shards, and the updated weights gathered to every replica (and the
//      tied head rows sent to the last stage, as before the first step).
// With one rank this is the plain step: one micro-batch (or several, for
// gradient accumulation), no communication.
#ifndef PLATEAU_ENGINE_TRAIN_TRAINING_STEP_H_
#define PLATEAU_ENGINE_TRAIN_TRAINING_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/zero_shards.h"
#include "engine/train/rank_context.h"

namespace plateau::engine {

struct StepResult {
  double cross_entropy = 0.0;   // mean over the batch's tokens
  double load_balancing = 0.0;  // summed over layers, mean over micro-batches
  double z_loss = 0.0;          // the same, of the router z-loss
  double gradient_norm = 0.0;   // of the whole model, before clipping
  // Token copies each expert received, over the whole batch:
  // [layer][expert] of the whole model, on every rank.
  std::vector<std::vector<int64_t>> expert_tokens;
};

class TrainingStep {
 public:
  // REQUIRES: the optimizer owns exactly shards->owned(); every pointer
  // outlives this object.
  TrainingStep(const RankContext& ranks, Model* model, ZeroShards* shards,
               Optimizer* optimizer, int64_t micro_batches,
               AccountedAllocator* allocator);

  // tokens: host, the whole step's batch (sequences, seq_len + 1), the same
  // on every rank. REQUIRES: sequences % (micro_batches * batch ranks) == 0.
  // INTERNAL when the loss or the gradient norm is not finite (nothing is
  // updated then).
  absl::StatusOr<StepResult> Run(const int32_t* tokens, int64_t sequences,
                                 float learning_rate, int64_t step,
                                 double max_gradient_norm);

 private:
  RankContext ranks_;
  Model* model_;
  ZeroShards* shards_;
  Optimizer* optimizer_;
  int64_t micro_batches_;
  AccountedAllocator* allocator_;
  // Whether the tied head rows were sent since the weights were set up or
  // loaded (a first Run sends them before it starts).
  bool tied_head_shared_ = false;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_TRAINING_STEP_H_
