#include "worker/engine/model/model_config.h"

namespace plateau::engine {

ModelConfig ModelConfigFromSpec(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  ModelConfig config;
  config.layers = model.layers();
  config.d_model = model.d_model();
  config.heads = model.heads();
  config.experts = model.experts();
  config.top_k = model.top_k();
  config.ffn_hidden = model.ffn_hidden();
  config.vocab = model.vocab();
  config.seq_len = model.seq_len();
  config.activation_checkpointing = spec.schedules().activation_checkpointing();
  return config;
}

}  // namespace plateau::engine
