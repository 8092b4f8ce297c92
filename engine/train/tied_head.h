// Tied embeddings over pipeline stages, as Megatron-Core's embedding group
// does it but by point-to-point messages: the first stage holds
// embed.weight, the last stage a copy of its head rows
// (Model::tied_head_weights), which is no parameter. Rank (ep, dp) of the
// first stage pairs with rank (ep, dp) of the last over their pipeline
// group; the rows are the pair's ModelShard head rows (a Ring-DTP shard, or
// the whole vocabulary). Both calls do nothing on other ranks and in a
// model without the copy, so every rank may call them.
#ifndef PLATEAU_ENGINE_TRAIN_TIED_HEAD_H_
#define PLATEAU_ENGINE_TRAIN_TIED_HEAD_H_

#include "absl/status/status.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/model/model.h"
#include "engine/train/rank_context.h"

namespace plateau::engine {

// The first stage sends its current rows of embed.weight (bf16 with bf16
// weight storage); the last stage receives them into its copy.
absl::Status ShareTiedHeadWeights(const RankContext& ranks, Model& model);

// The last stage sends the head's float32 gradient; the first stage adds it
// to its rows of embed.weight's gradient (received in a
// TiedHeadGradientsBuffer, freed before it returns; rounded once where
// that gradient is bf16), before the gradients are reduced over replicas.
absl::Status AddTiedHeadGradients(const RankContext& ranks, Model& model,
                                  AccountedAllocator& allocator);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_TIED_HEAD_H_
