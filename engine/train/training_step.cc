#include "engine/train/training_step.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/model_footprint.h"
#include "engine/optim/gradient_clipping.h"
#include "engine/train/stage_links.h"
#include "engine/train/tied_head.h"

namespace plateau::engine {

TrainingStep::TrainingStep(const RankContext& ranks, Model* model,
                           ZeroShards* shards, Optimizer* optimizer,
                           int64_t micro_batches, AccountedAllocator* allocator)
    : ranks_(ranks),
      model_(model),
      shards_(shards),
      optimizer_(optimizer),
      micro_batches_(micro_batches),
      allocator_(allocator) {}

absl::StatusOr<StepResult> TrainingStep::Run(const int32_t* tokens,
                                             int64_t sequences,
                                             float learning_rate, int64_t step,
                                             double max_gradient_norm) {
  const ModelConfig& config = model_->config();
  const ModelShard& shard = model_->layout().shard();
  const int64_t batch_ranks = ranks_.batch_ranks();
  if (sequences < 1 || sequences % (micro_batches_ * batch_ranks) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(sequences, " sequences do not split into ", micro_batches_,
                     " micro-batches over ", batch_ranks, " ranks"));
  }
  const int64_t rank_sequences = sequences / (micro_batches_ * batch_ranks);
  const int64_t row = config.seq_len + 1;
  auto micro_batch_tokens = [&](int64_t id) {
    return tokens +
           (id * batch_ranks + ranks_.batch_index()) * rank_sequences * row;
  };
  LossWeights weights;
  weights.cross_entropy_per_token =
      1.0 / static_cast<double>(sequences * config.seq_len);
  weights.router_losses = 1.0 / static_cast<double>(micro_batches_);

  // Tied embeddings over stages: the last stage's copy of the head rows
  // starts as the table it was set up or loaded with.
  if (!tied_head_shared_) {
    RETURN_IF_ERROR(ShareTiedHeadWeights(ranks_, *model_));
    tied_head_shared_ = true;
  }

  // ---- 1. The pipeline: 1F1B over this rank's micro-batches ----
  model_->ZeroGradients();
  double cross_entropy_sum = 0.0;  // of micro-batch means (last stage)
  double load_balancing_sum = 0.0;
  double z_loss_sum = 0.0;
  std::vector<std::vector<int64_t>> expert_tokens(
      shard.layer_count, std::vector<int64_t>(config.experts, 0));
  auto forward = [&](int64_t id, Tensor input) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(StageOutput output,
                     model_->Forward(id, micro_batch_tokens(id), rank_sequences,
                                     std::move(input), weights));
    cross_entropy_sum += output.cross_entropy;
    load_balancing_sum += output.router.load_balancing;
    z_loss_sum += output.router.z_loss;
    for (int64_t l = 0; l < shard.layer_count; ++l) {
      for (int64_t e = 0; e < config.experts; ++e) {
        expert_tokens[l][e] += model_->expert_tokens()[l][e];
      }
    }
    return std::move(output.activations);
  };
  StageLinks links(ranks_, BoundaryActivationsBuffer(config, rank_sequences),
                   ResidualGradientBuffer(config, rank_sequences), allocator_);
  const int64_t warmup =
      std::min<int64_t>(ranks_.sizes.pp - ranks_.pp_index - 1, micro_batches_);
  const int64_t steady = micro_batches_ - warmup;
  int64_t next_forward = 0;
  int64_t next_backward = 0;
  for (int64_t i = 0; i < warmup; ++i, ++next_forward) {
    ASSIGN_OR_RETURN(Tensor input, links.ReceiveForward(next_forward));
    ASSIGN_OR_RETURN(Tensor output, forward(next_forward, std::move(input)));
    RETURN_IF_ERROR(links.SendForward(output, next_forward));
  }
  Tensor input;
  if (steady > 0) {
    ASSIGN_OR_RETURN(input, links.ReceiveForward(next_forward));
  }
  for (int64_t i = 0; i < steady; ++i, ++next_backward) {
    ASSIGN_OR_RETURN(Tensor output, forward(next_forward, std::move(input)));
    ASSIGN_OR_RETURN(
        Tensor output_gradient,
        links.SendForwardReceiveBackward(output, next_forward, next_backward));
    ++next_forward;
    output.Reset();
    ASSIGN_OR_RETURN(
        Tensor input_gradient,
        model_->Backward(next_backward, std::move(output_gradient)));
    if (i == steady - 1) {
      RETURN_IF_ERROR(links.SendBackward(input_gradient, next_backward));
    } else {
      ASSIGN_OR_RETURN(input, links.SendBackwardReceiveForward(
                                  input_gradient, next_backward, next_forward));
    }
  }
  for (int64_t i = 0; i < warmup; ++i, ++next_backward) {
    ASSIGN_OR_RETURN(Tensor output_gradient,
                     links.ReceiveBackward(next_backward));
    ASSIGN_OR_RETURN(
        Tensor input_gradient,
        model_->Backward(next_backward, std::move(output_gradient)));
    RETURN_IF_ERROR(links.SendBackward(input_gradient, next_backward));
  }

  // ---- 2. Gradients summed over replicas; this rank keeps its shards ----
  RETURN_IF_ERROR(AddTiedHeadGradients(ranks_, *model_, *allocator_));
  const SplitBuffers gradients = model_->gradient_buffers();
  kernels::Ops& ops = model_->ops();
  RETURN_IF_ERROR(shards_->ReduceGradients(gradients, ops, *allocator_));

  // ---- 3. Loss, expert load and squared gradient norm over the world ----
  // Each value is contributed once: the cross-entropy by the last stage's
  // batch ranks (each its own sequences), the router losses and the expert
  // load (the same on every batch rank of a stage) by batch rank 0.
  // [cross-entropy, load balancing, squared norm, z-loss, expert load...]
  constexpr int64_t kExpertTokens = 4;
  const bool reports_stage_totals = ranks_.batch_index() == 0;
  std::vector<double> totals(kExpertTokens + config.layers * config.experts,
                             0.0);
  if (ranks_.last_stage()) {
    totals[0] =
        cross_entropy_sum / static_cast<double>(micro_batches_ * batch_ranks);
  }
  if (reports_stage_totals) {
    totals[1] = load_balancing_sum / static_cast<double>(micro_batches_);
    totals[3] = z_loss_sum / static_cast<double>(micro_batches_);
    for (int64_t l = 0; l < shard.layer_count; ++l) {
      for (int64_t e = 0; e < config.experts; ++e) {
        totals[kExpertTokens + (shard.first_layer + l) * config.experts + e] =
            static_cast<double>(expert_tokens[l][e]);
      }
    }
  }
  ASSIGN_OR_RETURN(totals[2],
                   shards_->OwnedSumOfSquares(gradients, ops, *allocator_));
  if (ranks_.world != nullptr) {
    RETURN_IF_ERROR(ranks_.world->AllReduceSum(
        totals.data(), static_cast<int64_t>(totals.size())));
  }
  StepResult result;
  result.cross_entropy = totals[0];
  result.load_balancing = totals[1];
  result.gradient_norm = std::sqrt(totals[2]);
  result.z_loss = totals[3];
  result.expert_tokens.assign(config.layers,
                              std::vector<int64_t>(config.experts));
  for (int64_t l = 0; l < config.layers; ++l) {
    for (int64_t e = 0; e < config.experts; ++e) {
      result.expert_tokens[l][e] =
          std::llround(totals[kExpertTokens + l * config.experts + e]);
    }
  }
  const double loss =
      result.cross_entropy + result.load_balancing + result.z_loss;
  if (!std::isfinite(loss)) {
    return absl::InternalError(
        absl::StrCat("loss became ", loss, " at step ", step,
                     "; lower optimizer.lr or raise optimizer.warmup_steps"));
  }
  if (!std::isfinite(result.gradient_norm)) {
    return absl::InternalError(absl::StrCat(
        "gradient norm became ", result.gradient_norm, " at step ", step,
        " (loss ", loss, "); lower optimizer.lr or set optimizer.grad_clip"));
  }

  // ---- 4. Clip, update the owned shards, gather the weights ----
  const float clip =
      GradientClipFactor(result.gradient_norm, max_gradient_norm);
  if (clip != 1.0f) {
    RETURN_IF_ERROR(shards_->ScaleOwned(gradients, clip, ops, *allocator_));
  }
  RETURN_IF_ERROR(optimizer_->Step(learning_rate, step));
  RETURN_IF_ERROR(
      shards_->GatherWeights(model_->weight_buffers(), ops, *allocator_));
  RETURN_IF_ERROR(ShareTiedHeadWeights(ranks_, *model_));
  model_->UpdateExpertBias(expert_tokens);
  return result;
}

}  // namespace plateau::engine
