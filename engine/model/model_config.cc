#include "engine/model/model_config.h"

#include <algorithm>

namespace plateau::engine {

ModelConfig ModelConfigFromSpec(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  ModelConfig config;
  config.layers = model.layers();
  config.d_model = model.d_model();
  config.heads = model.heads();
  config.kv_heads = model.has_kv_heads() ? model.kv_heads() : model.heads();
  config.experts = model.experts();
  config.top_k = model.top_k();
  config.ffn_hidden = model.ffn_hidden();
  config.vocab = model.vocab();
  config.seq_len = model.seq_len();
  if (model.has_rope_theta()) config.rope_theta = model.rope_theta();
  if (model.has_rms_epsilon()) {
    config.rms_epsilon = static_cast<float>(model.rms_epsilon());
  }
  if (model.has_aux_loss_coefficient()) {
    config.load_balancing_coefficient =
        static_cast<float>(model.aux_loss_coefficient());
  }
  if (model.balancing() == v1::BALANCING_BIAS ||
      model.balancing() == v1::BALANCING_NONE) {
    config.load_balancing_coefficient = 0.0f;
  }
  config.expert_bias = model.balancing() == v1::BALANCING_BIAS;
  if (model.router() == v1::ROUTER_SCORE_SIGMOID) {
    config.router_score = kernels::RouterScore::kSigmoid;
  }
  if (model.has_bias_update_rate()) {
    config.expert_bias_update_rate =
        static_cast<float>(model.bias_update_rate());
  }
  if (model.has_z_loss_coefficient()) {
    config.z_loss_coefficient = static_cast<float>(model.z_loss_coefficient());
  }
  config.qk_norm = model.qk_norm();
  config.tie_embeddings = model.tie_embeddings();
  config.shared_experts = model.shared_experts();
  if (config.shared_experts > 0) {
    config.shared_ffn_hidden = model.has_shared_ffn_hidden()
                                   ? model.shared_ffn_hidden()
                                   : model.ffn_hidden();
  }
  config.matmul_precision = spec.precision() == v1::PRECISION_FP32
                                ? kernels::GemmPrecision::kFloat32
                                : kernels::GemmPrecision::kBf16;
  const v1::OptimizerOffload offload = spec.schedules().optimizer_offload();
  config.bf16_weight_storage =
      config.matmul_precision == kernels::GemmPrecision::kBf16 &&
      offload != v1::OPTIMIZER_OFFLOAD_NONE &&
      offload != v1::OPTIMIZER_OFFLOAD_UNSPECIFIED;
  config.bf16_gradients =
      config.bf16_weight_storage &&
      spec.gradient_accumulation() == v1::GRADIENT_ACCUMULATION_BF16;
  config.activation_checkpointing = spec.schedules().activation_checkpointing();
  config.offload_checkpoints = spec.schedules().sco();
  config.dispatch_chunk_tokens = spec.schedules().dispatch_chunk_tokens();
  if (spec.schedules().ring_dtp()) {
    config.vocab_block = RingDtpVocabBlock(config.d_model, config.vocab);
  }
  return config;
}

int64_t MatmulStagingBytes(const ModelConfig& config) {
  if (config.matmul_precision != kernels::GemmPrecision::kBf16) return 0;
  constexpr int64_t kMiB = int64_t{1} << 20;
  constexpr int64_t kBf16Bytes = 2;
  const int64_t d = config.d_model;
  const int64_t head_rows =
      config.vocab_block > 0 ? config.vocab_block : config.vocab;
  const int64_t largest_weight =
      std::max({config.qkv_width() * d, config.ffn_hidden * d,
                config.shared_hidden() * d, head_rows * d});
  const int64_t bytes = 4 * largest_weight * kBf16Bytes;
  return std::clamp((bytes + kMiB - 1) / kMiB, int64_t{1}, int64_t{64}) * kMiB;
}

DType ProductInputType(const ModelConfig& config) {
  return config.matmul_precision == kernels::GemmPrecision::kBf16
             ? DType::kBfloat16
             : DType::kFloat32;
}

DType RoundedActivationType(const ModelConfig& config) {
  return ProductInputType(config);
}

int64_t RingDtpVocabBlock(int64_t d_model, int64_t vocab) {
  // A block of logits as large as the hidden states (tokens, d_model): the
  // head's peak is then that of one more activation, whatever the
  // vocabulary; at least 256 columns, so the products stay efficient.
  return std::min(vocab, std::max<int64_t>(256, d_model));
}

}  // namespace plateau::engine
