// For tests: a model small enough to run every layer's forward and backward
// in milliseconds on the CPU, with expert parallelism (4 experts, top 2),
// more than one head, and a vocabulary and sequence length that divide
// nothing evenly.
#ifndef PLATEAU_ENGINE_MODEL_TINY_MODEL_CONFIG_H_
#define PLATEAU_ENGINE_MODEL_TINY_MODEL_CONFIG_H_

#include "engine/model/model_config.h"

namespace plateau::engine {

inline ModelConfig TinyModelConfig() {
  ModelConfig config;
  config.layers = 2;
  config.d_model = 16;
  config.heads = 2;
  config.kv_heads = 2;
  config.experts = 4;
  config.top_k = 2;
  config.ffn_hidden = 12;
  config.vocab = 23;
  config.seq_len = 9;
  return config;
}

// The same with grouped-query attention: four query heads in two groups,
// each sharing one key and value head.
inline ModelConfig TinyGroupedQueryModelConfig() {
  ModelConfig config = TinyModelConfig();
  config.heads = 4;
  config.kv_heads = 2;
  return config;
}

// The router z-loss, at a coefficient large enough that its gradient shows.
inline ModelConfig TinyZLossModelConfig() {
  ModelConfig config = TinyModelConfig();
  config.z_loss_coefficient = 0.05f;
  return config;
}

// Grouped-query attention with QK-norm, as Qwen3 has it: two query heads
// sharing one key and value head, each head of 8 values normalised.
inline ModelConfig TinyQkNormModelConfig() {
  ModelConfig config = TinyModelConfig();
  config.kv_heads = 1;
  config.qk_norm = true;
  return config;
}

// Aux-loss-free balancing, as `balancing: bias` configures it: an expert
// bias in the choice of experts and no load-balancing loss.
inline ModelConfig TinyExpertBiasModelConfig() {
  ModelConfig config = TinyModelConfig();
  config.expert_bias = true;
  config.load_balancing_coefficient = 0.0f;
  return config;
}

// DeepSeek-V3's routing: the sigmoid router with aux-loss-free balancing.
inline ModelConfig TinySigmoidRouterModelConfig() {
  ModelConfig config = TinyExpertBiasModelConfig();
  config.router_score = kernels::RouterScore::kSigmoid;
  return config;
}

// Two shared experts of a hidden width of their own, beside the routed
// ones.
inline ModelConfig TinySharedExpertsModelConfig() {
  ModelConfig config = TinyModelConfig();
  config.shared_experts = 2;
  config.shared_ffn_hidden = 10;
  return config;
}

// Tied embeddings: the head projects onto the embedding's table.
inline ModelConfig TinyTiedEmbeddingsModelConfig() {
  ModelConfig config = TinyModelConfig();
  config.tie_embeddings = true;
  return config;
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_TINY_MODEL_CONFIG_H_
