#include "engine/model/model_config.h"

#include <algorithm>

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
  config.offload_checkpoints = spec.schedules().sco();
  config.dispatch_chunk_tokens = spec.schedules().dispatch_chunk_tokens();
  if (spec.schedules().ring_dtp()) {
    config.vocab_block = RingDtpVocabBlock(config.d_model, config.vocab);
  }
  return config;
}

int64_t RingDtpVocabBlock(int64_t d_model, int64_t vocab) {
  // A block of logits as large as the hidden states (tokens, d_model): the
  // head's peak is then that of one more activation, whatever the
  // vocabulary; at least 256 columns, so the products stay efficient.
  return std::min(vocab, std::max<int64_t>(256, d_model));
}

}  // namespace plateau::engine
