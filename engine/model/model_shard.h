// The part of the model one rank holds: the layers of its pipeline stage and
// its expert-parallel share of every layer's experts, and with Ring-DTP over
// the expert-parallel ranks its share of the lm_head's vocabulary rows.
// Whole() is the whole model (one rank); For() a rank's share of an ep x pp
// split.
#ifndef PLATEAU_ENGINE_MODEL_MODEL_SHARD_H_
#define PLATEAU_ENGINE_MODEL_MODEL_SHARD_H_

#include <cstdint>

#include "engine/model/model_config.h"

namespace plateau::engine {

struct ModelShard {
  int64_t first_layer = 0;
  int64_t layer_count = 0;
  int64_t first_expert = 0;
  int64_t expert_count = 0;
  bool has_embedding = true;  // the first pipeline stage
  bool has_head = true;       // the last pipeline stage
  // The lm_head rows [head_first_row, head_first_row + head_rows) of the
  // vocabulary; head_sharded when that is not the whole vocabulary.
  int64_t head_first_row = 0;
  int64_t head_rows = 0;
  bool head_sharded = false;
  // The dense and expert regions of the flat buffers are padded to
  // multiples of these (the sizes of the groups that shard them, ZeRO-1).
  int64_t dense_alignment = 1;
  int64_t expert_alignment = 1;

  static ModelShard Whole(const ModelConfig& config) {
    return For(config, 0, 1, 0, 1);
  }
  // Stage pp_index of pp holds layers evenly split in order; expert rank
  // ep_index of ep holds experts evenly split in order, and with Ring-DTP
  // (config.vocab_block > 0) VocabShardBegin's share of the vocabulary.
  // REQUIRES: layers % pp == 0 and experts % ep == 0.
  static ModelShard For(const ModelConfig& config, int pp_index, int pp,
                        int ep_index, int ep) {
    ModelShard shard;
    shard.layer_count = config.layers / pp;
    shard.first_layer = pp_index * shard.layer_count;
    shard.expert_count = config.experts / ep;
    shard.first_expert = ep_index * shard.expert_count;
    shard.has_embedding = pp_index == 0;
    shard.has_head = pp_index == pp - 1;
    shard.head_rows = config.vocab;
    if (config.vocab_block > 0 && ep > 1) {
      shard.head_first_row = VocabShardBegin(config.vocab, ep_index, ep);
      shard.head_rows = VocabShardBegin(config.vocab, ep_index + 1, ep) -
                        shard.head_first_row;
      shard.head_sharded = true;
    }
    return shard;
  }

  // A rank's shard in a run of dp data-parallel replicas: For's, its
  // regions padded for ZeRO-1 (the dense one over the stage's ep x dp
  // batch ranks, the experts' over the dp replicas).
  static ModelShard ForRank(const ModelConfig& config, int pp_index, int pp,
                            int ep_index, int ep, int dp) {
    ModelShard shard = For(config, pp_index, pp, ep_index, ep);
    shard.dense_alignment = int64_t{ep} * dp;
    shard.expert_alignment = dp;
    return shard;
  }

  // The first vocabulary row of shard `index` of `count` (rows split in
  // order, sizes differing by one at most).
  static int64_t VocabShardBegin(int64_t vocab, int64_t index, int64_t count) {
    return vocab * index / count;
  }
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_MODEL_SHARD_H_
