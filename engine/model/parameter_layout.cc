#include "engine/model/parameter_layout.h"

#include <cmath>
#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace plateau::engine {
namespace {

// GPT-2's initialisation: N(0, 0.02), with the projections that write into
// the residual stream (wo, w2) scaled by 1/sqrt(2 * layers) so the stream's
// variance does not grow with depth.
constexpr float kInitStd = 0.02f;

}  // namespace

ParameterLayout::ParameterLayout(const ModelConfig& config)
    : ParameterLayout(config, ModelShard::Whole(config)) {}

ParameterLayout::ParameterLayout(const ModelConfig& config,
                                 const ModelShard& shard)
    : shard_(shard),
      bf16_weight_storage_(config.bf16_weight_storage),
      bf16_gradients_(config.bf16_gradients) {
  const int64_t d = config.d_model;
  const int64_t experts = config.experts;
  const int64_t ffn = config.ffn_hidden;
  const float residual_std =
      kInitStd / std::sqrt(2.0f * static_cast<float>(config.layers));
  layers_.resize(shard.layer_count);
  auto round_up = [](int64_t value, int64_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
  };
  // Dense parameters read in float32 whatever the precision.
  for (int64_t i = 0; i < shard.layer_count; ++i) {
    const std::string prefix =
        absl::StrCat("layers.", shard.first_layer + i, ".");
    LayerOffsets& offsets = layers_[i];
    offsets.attn_norm =
        Add(prefix + "attn_norm.weight", {d}, ParameterRole::kNorm, 0.0f);
    if (config.qk_norm) {
      offsets.q_norm = Add(prefix + "attn.q_norm.weight", {config.head_dim()},
                           ParameterRole::kNorm, 0.0f);
      offsets.k_norm = Add(prefix + "attn.k_norm.weight", {config.head_dim()},
                           ParameterRole::kNorm, 0.0f);
    }
    offsets.moe_norm =
        Add(prefix + "moe_norm.weight", {d}, ParameterRole::kNorm, 0.0f);
    offsets.router = Add(prefix + "moe.router.weight", {experts, d},
                         ParameterRole::kRouter, kInitStd);
    if (config.expert_bias) {
      offsets.expert_bias = Add(prefix + "moe.router.expert_bias", {experts},
                                ParameterRole::kExpertBias, 0.0f);
    }
  }
  if (shard.has_head) {
    final_norm_offset_ =
        Add("final_norm.weight", {d}, ParameterRole::kNorm, 0.0f);
  }
  total_elements_ = round_up(total_elements_, shard.dense_alignment);
  bf16_begin_ = total_elements_;
  // Dense parameters that bf16 reads rounded: the embedding, padded as a
  // part of its own, then the product weights.
  if (shard.has_embedding) {
    embedding_offset_ = Add("embed.weight", {config.vocab, d},
                            ParameterRole::kEmbedding, kInitStd);
  }
  total_elements_ = round_up(total_elements_, shard.dense_alignment);
  dense_products_begin_ = total_elements_;
  for (int64_t i = 0; i < shard.layer_count; ++i) {
    const std::string prefix =
        absl::StrCat("layers.", shard.first_layer + i, ".");
    LayerOffsets& offsets = layers_[i];
    offsets.wqkv = Add(prefix + "attn.wq.weight", {d, d},
                       ParameterRole::kAttention, kInitStd);
    Add(prefix + "attn.wk.weight", {config.kv_width(), d},
        ParameterRole::kAttention, kInitStd);
    Add(prefix + "attn.wv.weight", {config.kv_width(), d},
        ParameterRole::kAttention, kInitStd);
    offsets.wo = Add(prefix + "attn.wo.weight", {d, d},
                     ParameterRole::kAttention, residual_std);
    if (config.shared_experts > 0) {
      const int64_t shared = config.shared_hidden();
      offsets.shared_w1 = Add(prefix + "moe.shared_experts.w1", {shared, d},
                              ParameterRole::kSharedExpert, kInitStd);
      offsets.shared_w3 = Add(prefix + "moe.shared_experts.w3", {shared, d},
                              ParameterRole::kSharedExpert, kInitStd);
      offsets.shared_w2 = Add(prefix + "moe.shared_experts.w2", {d, shared},
                              ParameterRole::kSharedExpert, residual_std);
    }
  }
  if (shard.has_head) {
    if (config.tie_embeddings && shard.has_embedding) {
      lm_head_offset_ = embedding_offset_ + shard.head_first_row * d;
    } else if (config.tie_embeddings) {
      // The first stage's rows, copied: no parameter of this stage.
      tied_head_copy_elements_ = shard.head_rows * d;
    } else if (!shard.head_sharded) {
      lm_head_offset_ = Add("lm_head.weight", {config.vocab, d},
                            ParameterRole::kHead, kInitStd);
    }
  }
  total_elements_ = round_up(total_elements_, shard.dense_alignment);
  dense_elements_ = total_elements_;
  // Expert parameters: this rank's experts, a slice of each whole tensor.
  const int64_t local = shard.expert_count;
  for (int64_t i = 0; i < shard.layer_count; ++i) {
    const std::string prefix =
        absl::StrCat("layers.", shard.first_layer + i, ".moe.experts.");
    LayerOffsets& offsets = layers_[i];
    offsets.w1 =
        Add(prefix + "w1", {local, ffn, d}, ParameterRole::kExpert, kInitStd);
    offsets.w3 =
        Add(prefix + "w3", {local, ffn, d}, ParameterRole::kExpert, kInitStd);
    offsets.w2 = Add(prefix + "w2", {local, d, ffn}, ParameterRole::kExpert,
                     residual_std);
  }
  for (ParameterInfo& info : parameters_) {
    if (info.role != ParameterRole::kExpert) continue;
    info.global_shape[0] = experts;
    info.global_offset = shard.first_expert * (info.elements / local);
  }
  // A vocabulary shard of the lm_head is split over the same ranks.
  if (shard.has_head && shard.head_sharded && !config.tie_embeddings) {
    lm_head_offset_ = Add("lm_head.weight", {shard.head_rows, d},
                          ParameterRole::kHead, kInitStd);
    ParameterInfo& info = parameters_.back();
    info.global_shape[0] = config.vocab;
    info.global_offset = shard.head_first_row * d;
  }
  total_elements_ =
      dense_elements_ +
      round_up(total_elements_ - dense_elements_, shard.expert_alignment);
}

int64_t ParameterLayout::Add(std::string name, std::vector<int64_t> shape,
                             ParameterRole role, float init_std) {
  ParameterInfo info;
  info.name = std::move(name);
  info.elements = std::accumulate(shape.begin(), shape.end(), int64_t{1},
                                  std::multiplies<>());
  info.global_shape = shape;
  info.shape = std::move(shape);
  info.offset = total_elements_;
  info.role = role;
  info.init_std = init_std;
  total_elements_ += info.elements;
  parameters_.push_back(std::move(info));
  return parameters_.back().offset;
}

const ParameterInfo* ParameterLayout::Find(const std::string& name) const {
  for (const ParameterInfo& info : parameters_) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

}  // namespace plateau::engine
