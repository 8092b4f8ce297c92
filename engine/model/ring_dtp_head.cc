#include "engine/model/ring_dtp_head.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/status_macros.h"
#include "engine/memory/dtype.h"
#include "engine/model/linear.h"
#include "engine/model/logits.h"
#include "engine/model/output_head_footprint.h"

namespace plateau::engine {
namespace {

// Message tags of the ring, one per buffer of a hop.
constexpr uint32_t kWeightsTag = 1;
constexpr uint32_t kWeightGradientTag = 2;
constexpr uint32_t kHiddenTag = 3;
constexpr uint32_t kTargetsTag = 4;
constexpr uint32_t kLogsumexpTag = 5;
constexpr uint32_t kTargetLogitTag = 6;
constexpr uint32_t kHiddenGradientTag = 7;

// Rows [first_row, first_row + rows) of the vocabulary: a rank's share of
// the lm_head.
struct VocabShard {
  int64_t first_row = 0;
  int64_t rows = 0;
};

VocabShard ShardOf(const ModelConfig& config, int index, int count) {
  const int64_t begin = ModelShard::VocabShardBegin(config.vocab, index, count);
  return {begin,
          ModelShard::VocabShardBegin(config.vocab, index + 1, count) - begin};
}

// Tokens whose hidden states, targets and per-token state a ring step
// works on (this rank's own, or another rank's passing through).
struct TokenBlock {
  int64_t tokens = 0;
  LinearOperand hidden;  // (tokens, D), ProductInputType
  const int32_t* targets = nullptr;
  float* logsumexp = nullptr;
  float* target_logits = nullptr;    // forward only
  float* hidden_gradient = nullptr;  // backward only: accumulates
};

// This rank's lm_head shard as its products read it: under bf16 products
// its bf16 values (Model::HeadWeightsForPass: the stored bf16 weights, or
// the pass's copy), which are also what travels when the shards do, in
// ring buffers of ProductInputType.
absl::StatusOr<LinearOperand> OwnShardWeights(const LayerContext& context,
                                              LinearOperand lm_head) {
  if (lm_head.element_bytes() !=
      DTypeBytes(ProductInputType(*context.config))) {
    return absl::InternalError(
        "Ring-DTP: this pass has no bf16 lm_head shard "
        "(Model::HeadWeightsForPass hands it over)");
  }
  return lm_head;
}

// Folds the logits of `tokens` against a shard's rows (weights: the shard's
// (rows, D) slab) into their running logsumexp and target logits, one
// block of columns at a time (logits: a RingLogitsBuffer).
void FoldShard(const LayerContext& context, const TokenBlock& tokens,
               LinearOperand weights, const VocabShard& shard, Tensor& logits) {
  const ModelConfig& config = *context.config;
  const int64_t d = config.d_model;
  for (int64_t begin = 0; begin < shard.rows; begin += config.vocab_block) {
    const int64_t width = std::min(config.vocab_block, shard.rows - begin);
    ProjectLogits(context, tokens.tokens, width, tokens.hidden,
                  weights.At(begin * d), logits);
    LogitsFoldBlock(*context.ops, tokens.tokens, width, shard.first_row + begin,
                    logits, tokens.targets, tokens.logsumexp,
                    tokens.target_logits);
  }
}

// Backward of FoldShard: recomputes each block, turns it into its gradient
// in place, and adds it into the tokens' hidden gradient and the shard's
// weight gradient (weight_gradient: (rows, D)).
void FoldShardBackward(const LayerContext& context, const TokenBlock& tokens,
                       LinearOperand weights, float* weight_gradient,
                       const VocabShard& shard, Tensor& logits) {
  const ModelConfig& config = *context.config;
  const int64_t d = config.d_model;
  for (int64_t begin = 0; begin < shard.rows; begin += config.vocab_block) {
    const int64_t width = std::min(config.vocab_block, shard.rows - begin);
    const LinearOperand block_weights = weights.At(begin * d);
    ProjectLogits(context, tokens.tokens, width, tokens.hidden, block_weights,
                  logits);
    LogitsCrossEntropyBackward(
        *context.ops, tokens.tokens, width, shard.first_row + begin,
        tokens.targets, tokens.logsumexp,
        static_cast<float>(context.loss_weights.cross_entropy_per_token),
        logits);
    const LinearOperand dlogits = RowsOf(logits);
    context.ops->Gemm(LinearInputGradArgs(
        tokens.tokens, d, width, dlogits, block_weights, tokens.hidden_gradient,
        /*accumulate=*/true, config.matmul_precision));
    context.ops->Gemm(LinearWeightGradArgs(
        tokens.tokens, d, width, dlogits, tokens.hidden,
        weight_gradient + begin * d, config.matmul_precision));
  }
}

// The ring of Ring-DTP over the expert-parallel ranks: rank p holds vocab
// shard p. Each of P steps pairs one rank's tokens with one shard; between
// steps either the weight shards move one rank down the ring (each rank
// keeps its tokens) or the token blocks do (each rank keeps its shard),
// whichever moves fewer bytes.
class VocabRing {
 public:
  explicit VocabRing(const LayerContext& context)
      : context_(context),
        group_(*context.groups.experts),
        ranks_(group_.size()),
        self_(group_.rank()),
        down_((self_ + ranks_ - 1) % ranks_),
        up_((self_ + 1) % ranks_) {}

  // Every rank's token count, and whether token blocks travel (false:
  // weight shards do) in the forward or the backward pass.
  absl::Status Agree(bool backward) {
    std::vector<double> tokens(ranks_, 0.0);
    tokens[self_] = static_cast<double>(context_.tokens());
    RETURN_IF_ERROR(group_.AllReduceSum(tokens.data(), ranks_));
    tokens_.clear();
    int64_t most_tokens = 0;
    for (int r = 0; r < ranks_; ++r) {
      tokens_.push_back(static_cast<int64_t>(tokens[r]));
      most_tokens = std::max(most_tokens, tokens_.back());
    }
    const int64_t most_rows =
        LargestVocabShardRows(context_.config->vocab, ranks_);
    move_tokens_ =
        RingMovesTokens(*context_.config, most_tokens, most_rows, backward);
    most_tokens_ = most_tokens;
    most_rows_ = most_rows;
    return absl::OkStatus();
  }

  int ranks() const { return ranks_; }
  int self() const { return self_; }
  bool move_tokens() const { return move_tokens_; }
  int64_t tokens_of(int rank) const { return tokens_[rank]; }
  int64_t most_tokens() const { return most_tokens_; }
  int64_t most_rows() const { return most_rows_; }
  // Whose tokens (or shard) this rank works on at step `step`.
  int OwnerAt(int step) const { return (self_ + step) % ranks_; }

  // Sends `bytes_out` down the ring and receives `bytes_in` from up it.
  absl::Status Pass(const void* out, int64_t bytes_out, void* in,
                    int64_t bytes_in, uint32_t tag) {
    return group_.SendAndReceive(out, bytes_out, down_, tag, in, bytes_in, up_,
                                 tag);
  }

 private:
  const LayerContext& context_;
  Communicator& group_;
  const int ranks_;
  const int self_;
  const int down_;
  const int up_;
  std::vector<int64_t> tokens_;
  bool move_tokens_ = false;
  int64_t most_tokens_ = 0;
  int64_t most_rows_ = 0;
};

// Ring buffers for a token block in transit: its hidden states, targets and
// logsumexp, with its target logits (forward) or its hidden gradient
// (backward).
struct TokenBuffers {
  Tensor hidden, targets, logsumexp, target_logits, hidden_gradient;

  TokenBlock Block(int64_t tokens) {
    return {tokens,
            RowsOf(hidden),
            targets.i32(),
            logsumexp.f32(),
            target_logits.empty() ? nullptr : target_logits.f32(),
            hidden_gradient.empty() ? nullptr : hidden_gradient.f32()};
  }
};

absl::StatusOr<TokenBuffers> AllocateTokenBuffers(const LayerContext& context,
                                                  int64_t tokens,
                                                  bool backward) {
  const RingTokenBuffers specs = RingTokenBuffers::For(*context.config, tokens);
  TokenBuffers buffers;
  ASSIGN_OR_RETURN(buffers.hidden, context.Allocate(specs.hidden));
  ASSIGN_OR_RETURN(buffers.targets, context.Allocate(specs.targets));
  ASSIGN_OR_RETURN(buffers.logsumexp, context.Allocate(specs.logsumexp));
  if (backward) {
    ASSIGN_OR_RETURN(buffers.hidden_gradient,
                     context.Allocate(specs.hidden_gradient));
  } else {
    ASSIGN_OR_RETURN(buffers.target_logits,
                     context.Allocate(specs.target_logits));
  }
  return buffers;
}

// Passes `block` down the ring and takes the next one, of `incoming`
// tokens, from up it into `next`.
absl::StatusOr<TokenBlock> PassTokens(VocabRing& ring, int64_t d,
                                      const TokenBlock& block, int64_t incoming,
                                      TokenBuffers& next) {
  const int64_t out = block.tokens, in = incoming;
  const int64_t hidden_bytes = d * DTypeBytes(next.hidden.dtype());
  RETURN_IF_ERROR(ring.Pass(block.hidden.data(), out * hidden_bytes,
                            next.hidden.data(), in * hidden_bytes, kHiddenTag));
  RETURN_IF_ERROR(ring.Pass(block.targets, out * 4, next.targets.i32(), in * 4,
                            kTargetsTag));
  RETURN_IF_ERROR(ring.Pass(block.logsumexp, out * kFloatBytes,
                            next.logsumexp.f32(), in * kFloatBytes,
                            kLogsumexpTag));
  if (block.hidden_gradient != nullptr) {
    RETURN_IF_ERROR(ring.Pass(block.hidden_gradient, out * d * kFloatBytes,
                              next.hidden_gradient.f32(), in * d * kFloatBytes,
                              kHiddenGradientTag));
  } else {
    RETURN_IF_ERROR(ring.Pass(block.target_logits, out * kFloatBytes,
                              next.target_logits.f32(), in * kFloatBytes,
                              kTargetLogitTag));
  }
  return next.Block(incoming);
}

// Ring-DTP's forward: fills saved->logsumexp and target_logits for this
// rank's tokens.
absl::Status RingForward(const LayerContext& context,
                         const OutputHeadParameters<const float>& w,
                         const Tensor& targets, OutputHeadActivations* saved,
                         float* target_logits) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const ModelShard& shard = context.shard;
  context.ops->Fill(n, -std::numeric_limits<float>::infinity(),
                    saved->logsumexp.f32());
  TokenBlock own{n,
                 RowsOf(saved->normed),
                 targets.i32(),
                 saved->logsumexp.f32(),
                 target_logits,
                 nullptr};
  const VocabShard own_shard{shard.head_first_row, shard.head_rows};
  ASSIGN_OR_RETURN(const LinearOperand own_weights,
                   OwnShardWeights(context, w.lm_head));
  if (!shard.head_sharded) {
    ASSIGN_OR_RETURN(Tensor logits,
                     context.Allocate(RingLogitsBuffer(config, n)));
    FoldShard(context, own, own_weights, own_shard, logits);
    return absl::OkStatus();
  }
  VocabRing ring(context);
  RETURN_IF_ERROR(ring.Agree(/*backward=*/false));
  const int ranks = ring.ranks();
  const int64_t width = ring.move_tokens() ? ring.most_tokens() : n;
  ASSIGN_OR_RETURN(Tensor logits,
                   context.Allocate(RingLogitsBuffer(config, width)));
  if (!ring.move_tokens()) {
    // The shards travel; this rank's tokens fold every one of them.
    Tensor buffers[2];
    for (Tensor& buffer : buffers) {
      ASSIGN_OR_RETURN(
          buffer, context.Allocate(RingShardBuffer(config, ring.most_rows())));
    }
    const int64_t row_bytes = d * own_weights.element_bytes();
    LinearOperand current = own_weights;
    for (int step = 0; step < ranks; ++step) {
      const VocabShard visiting = ShardOf(config, ring.OwnerAt(step), ranks);
      FoldShard(context, own, current, visiting, logits);
      if (step + 1 == ranks) break;
      const VocabShard next = ShardOf(config, ring.OwnerAt(step + 1), ranks);
      Tensor& incoming = buffers[step % 2];
      RETURN_IF_ERROR(ring.Pass(current.data(), visiting.rows * row_bytes,
                                incoming.data(), next.rows * row_bytes,
                                kWeightsTag));
      current = RowsOf(incoming);
    }
    return absl::OkStatus();
  }
  // The token blocks travel, with their running state; this rank's shard
  // folds every one of them, and each state returns to its tokens' rank.
  TokenBuffers buffers[2];
  for (TokenBuffers& buffer : buffers) {
    ASSIGN_OR_RETURN(buffer, AllocateTokenBuffers(context, ring.most_tokens(),
                                                  /*backward=*/false));
  }
  TokenBlock current = own;
  for (int step = 0; step < ranks; ++step) {
    FoldShard(context, current, own_weights, own_shard, logits);
    if (step + 1 == ranks) break;
    ASSIGN_OR_RETURN(current, PassTokens(ring, d, current,
                                         ring.tokens_of(ring.OwnerAt(step + 1)),
                                         buffers[step % 2]));
  }
  // The block in hand belongs to the rank below; this rank's comes from
  // the rank above.
  RETURN_IF_ERROR(ring.Pass(current.logsumexp, current.tokens * kFloatBytes,
                            saved->logsumexp.f32(), n * kFloatBytes,
                            kLogsumexpTag));
  return ring.Pass(current.target_logits, current.tokens * kFloatBytes,
                   target_logits, n * kFloatBytes, kTargetLogitTag);
}

// Ring-DTP's backward: writes d_normed for this rank's tokens and adds this
// rank's shard's lm_head gradient. Every rank's loss weights must be the
// same (the training step's are).
absl::Status RingBackward(const LayerContext& context,
                          const OutputHeadParameters<const float>& w,
                          const OutputHeadParameters<float>& grads,
                          const Tensor& targets, OutputHeadActivations& saved,
                          float* d_normed) {
  const ModelConfig& config = *context.config;
  const int64_t n = context.tokens();
  const int64_t d = config.d_model;
  const ModelShard& shard = context.shard;
  context.ops->Fill(n * d, 0.0f, d_normed);
  TokenBlock own{n,
                 RowsOf(saved.normed),
                 targets.i32(),
                 saved.logsumexp.f32(),
                 nullptr,
                 d_normed};
  const VocabShard own_shard{shard.head_first_row, shard.head_rows};
  ASSIGN_OR_RETURN(const LinearOperand own_weights,
                   OwnShardWeights(context, w.lm_head));
  if (!shard.head_sharded) {
    ASSIGN_OR_RETURN(Tensor logits,
                     context.Allocate(RingLogitsBuffer(config, n)));
    FoldShardBackward(context, own, own_weights, grads.lm_head, own_shard,
                      logits);
    return absl::OkStatus();
  }
  VocabRing ring(context);
  RETURN_IF_ERROR(ring.Agree(/*backward=*/true));
  const int ranks = ring.ranks();
  const int64_t width = ring.move_tokens() ? ring.most_tokens() : n;
  ASSIGN_OR_RETURN(Tensor logits,
                   context.Allocate(RingLogitsBuffer(config, width)));
  if (!ring.move_tokens()) {
    // Each shard travels with the gradient it gathers, which ends at its
    // owner.
    struct Carried {
      Tensor weights, gradient;
    };
    Carried buffers[2];
    for (Carried& buffer : buffers) {
      ASSIGN_OR_RETURN(buffer.weights, context.Allocate(RingShardBuffer(
                                           config, ring.most_rows())));
      ASSIGN_OR_RETURN(
          buffer.gradient,
          context.Allocate(RingShardGradientBuffer(config, ring.most_rows())));
    }
    const int64_t row_bytes = d * own_weights.element_bytes();
    LinearOperand weights = own_weights;
    float* gradient = buffers[1].gradient.f32();
    context.ops->Fill(own_shard.rows * d, 0.0f, gradient);
    for (int step = 0; step < ranks; ++step) {
      const VocabShard visiting = ShardOf(config, ring.OwnerAt(step), ranks);
      FoldShardBackward(context, own, weights, gradient, visiting, logits);
      // After the last step the gradient in hand is the rank below's;
      // this rank's own comes from above.
      const VocabShard next =
          step + 1 == ranks ? own_shard
                            : ShardOf(config, ring.OwnerAt(step + 1), ranks);
      Carried& incoming = buffers[step % 2];
      if (step + 1 < ranks) {
        RETURN_IF_ERROR(ring.Pass(weights.data(), visiting.rows * row_bytes,
                                  incoming.weights.data(),
                                  next.rows * row_bytes, kWeightsTag));
      }
      RETURN_IF_ERROR(ring.Pass(
          gradient, visiting.rows * d * kFloatBytes, incoming.gradient.f32(),
          next.rows * d * kFloatBytes, kWeightGradientTag));
      weights = RowsOf(incoming.weights);
      gradient = incoming.gradient.f32();
    }
    context.ops->Add(own_shard.rows * d, grads.lm_head, gradient,
                     grads.lm_head);
    return absl::OkStatus();
  }
  // The token blocks travel with the hidden gradient they gather, which
  // ends at their rank; this rank's shard gradient stays here.
  TokenBuffers buffers[2];
  for (TokenBuffers& buffer : buffers) {
    ASSIGN_OR_RETURN(buffer, AllocateTokenBuffers(context, ring.most_tokens(),
                                                  /*backward=*/true));
  }
  TokenBlock current = own;
  // This rank's own hidden gradient starts in a ring buffer, as it leaves.
  current.hidden_gradient = buffers[1].hidden_gradient.f32();
  context.ops->Fill(n * d, 0.0f, current.hidden_gradient);
  for (int step = 0; step < ranks; ++step) {
    FoldShardBackward(context, current, own_weights, grads.lm_head, own_shard,
                      logits);
    if (step + 1 == ranks) break;
    ASSIGN_OR_RETURN(current, PassTokens(ring, d, current,
                                         ring.tokens_of(ring.OwnerAt(step + 1)),
                                         buffers[step % 2]));
  }
  return ring.Pass(current.hidden_gradient, current.tokens * d * kFloatBytes,
                   d_normed, n * d * kFloatBytes, kHiddenGradientTag);
}

}  // namespace

absl::StatusOr<double> RingDtpHead::Forward(
    const LayerContext& context, const OutputHeadParameters<const float>& w,
    const Tensor& targets, OutputHeadActivations* saved) const {
  const int64_t n = context.tokens();
  ASSIGN_OR_RETURN(Tensor target_logits,
                   context.Allocate(OutputHeadBuffers::For(*context.config,
                                                           context.sequences)
                                        .target_logits));
  RETURN_IF_ERROR(RingForward(context, w, targets, saved, target_logits.f32()));
  return (context.ops->Sum(n, saved->logsumexp.f32()) -
          context.ops->Sum(n, target_logits.f32())) /
         static_cast<double>(n);
}

absl::Status RingDtpHead::Backward(const LayerContext& context,
                                   const OutputHeadParameters<const float>& w,
                                   const OutputHeadParameters<float>& grads,
                                   const Tensor& targets,
                                   OutputHeadActivations* saved,
                                   float* d_normed) const {
  return RingBackward(context, w, grads, targets, *saved, d_normed);
}

}  // namespace plateau::engine
