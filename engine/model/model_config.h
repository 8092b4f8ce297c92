// The model's hyperparameters (docs/ARCHITECTURE.md section 8), taken from a
// validated job spec. The same definition runs on every backend.
#ifndef PLATEAU_ENGINE_MODEL_MODEL_CONFIG_H_
#define PLATEAU_ENGINE_MODEL_MODEL_CONFIG_H_

#include <cstdint>

#include "engine/memory/dtype.h"
#include "kernels/ops.h"
#include "proto/job.pb.h"

namespace plateau::engine {

// The model options' defaults, where a spec leaves them out.
inline constexpr double kDefaultRopeTheta = 10000.0;
inline constexpr float kDefaultRmsEpsilon = 1e-5f;
inline constexpr float kDefaultAuxLossCoefficient = 0.01f;
inline constexpr float kDefaultZLossCoefficient = 0.0f;
inline constexpr float kDefaultBiasUpdateRate = 1e-3f;

struct ModelConfig {
  int64_t layers = 0;
  int64_t d_model = 0;
  int64_t heads = 0;
  // Key and value heads (model.kv_heads; heads when the spec leaves it out):
  // query head h attends with key and value head h / (heads / kv_heads), as
  // grouped-query attention does. kv_heads == heads is multi-head attention.
  int64_t kv_heads = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  // RMSNorm's epsilon, in every norm (model.rms_epsilon).
  float rms_epsilon = kDefaultRmsEpsilon;
  // Rotary embedding's base: pair i of a head turns by position *
  // rope_theta^(-2i / head_dim) (model.rope_theta).
  double rope_theta = kDefaultRopeTheta;
  // aux = coefficient * experts * sum_e f_e * P_e, added to the loss
  // (model.aux_loss_coefficient); 0 under balancing: bias or none.
  float load_balancing_coefficient = kDefaultAuxLossCoefficient;
  // Auxiliary-loss-free balancing (model.balancing: bias, DeepSeek-V3's): a
  // per-expert bias, a parameter the optimizers leave alone
  // (ParameterRole::kExpertBias), is added to the router's probabilities
  // for the choice of experts only; after each step it rises by
  // expert_bias_update_rate for each expert that received fewer token
  // copies than the mean over the batch group and falls by it for each that
  // received more (Model::UpdateExpertBias).
  bool expert_bias = false;
  float expert_bias_update_rate = kDefaultBiasUpdateRate;
  // How the router scores the experts (model.router): softmax, or each
  // expert's sigmoid (DeepSeek-V3), the chosen ones' scores normalised into
  // the gates (kernels/ops.h, RouterForward). The load-balancing loss's P_e
  // is then the mean of the scores normalised over the experts, as
  // Megatron-Core's is. No z-loss with the sigmoid.
  kernels::RouterScore router_score = kernels::RouterScore::kSoftmax;
  // z = coefficient * mean over tokens of logsumexp_e(router logits)^2,
  // added to the loss (model.z_loss_coefficient; ST-MoE's router z-loss,
  // which keeps the router's logits small). 0: none, and nothing of it is
  // computed or stored.
  float z_loss_coefficient = kDefaultZLossCoefficient;
  // QK-norm (model.qk_norm): each head of q and of k RMS-normalised (over
  // its head_dim values, rms_epsilon) and scaled by a learned weight of
  // head_dim, one for q's heads and one for k's, before the rotary
  // embedding, as OLMoE and Qwen3 do; it bounds the attention logits.
  bool qk_norm = false;
  // Shared experts (model.shared_experts, DeepSeek-V3's and Qwen2-MoE's):
  // SwiGLU experts of shared_ffn_hidden each that every token passes
  // through, their sum added to the routed experts' output. Summed
  // SwiGLUs are one SwiGLU as wide as all of them, which is how they are
  // stored and run (shared_hidden() units, as DeepSeek-V3 does). 0: none.
  int64_t shared_experts = 0;
  int64_t shared_ffn_hidden = 0;
  // Tied embeddings (model.tie_embeddings): the head projects onto the
  // embedding's table, which has no lm_head beside it and takes the head's
  // gradient as well as its own. Both must be on one pipeline stage
  // (ModelShard: has_embedding wherever has_head).
  bool tie_embeddings = false;
  // Keep only each layer's input in forward; recompute the rest in backward.
  bool activation_checkpointing = true;
  // SCO: with checkpointing, each layer input goes to the host pool as soon
  // as it is produced and comes back just before its recompute, the copies
  // overlapping compute; at most two layer inputs are on the device at once.
  bool offload_checkpoints = false;
  // Ring-DTP: the vocabulary projection runs over blocks of this many
  // vocabulary columns and never holds (tokens, vocab) logits; 0: the plain
  // head.
  int64_t vocab_block = 0;
  // PipelinedLLEP: each source rank sends at most this many token copies to
  // each expert rank per dispatch chunk; 0: one unchunked dispatch.
  int64_t dispatch_chunk_tokens = 0;
  // The projections' products (attention, experts, output head): bf16
  // inputs with float32 accumulation under `precision: bf16`, exact under
  // fp32. Everything else (norms, softmax, the router, the loss, gradients
  // and their reductions, the optimizer) computes in float32. float32 here,
  // the reference exactness tests compare against; a job spec's default is
  // bf16. Under bf16 the activations only these products read are stored in
  // bf16 (ProductInputType), and so are some others, rounded
  // (RoundedActivationType; docs/ARCHITECTURE.md section 8).
  kernels::GemmPrecision matmul_precision = kernels::GemmPrecision::kFloat32;
  // Under bf16 products with the optimizer offloaded (its float32 masters
  // on the host, the weights' source of truth): the product weights and
  // the embedding (ParameterLayout::bf16_begin() on) are kept on the
  // device in bf16 only, as the products and the lookup read them, and the
  // optimizer writes them back rounded. The same loss and gradients as with
  // float32 device weights, in half their bytes and without the per-pass
  // copies. REQUIRES: bf16 products.
  bool bf16_weight_storage = false;
  // bf16 gradient accumulation (a job spec's `gradient_accumulation:
  // bf16`): their gradients too are kept on the device in bf16 only. Each
  // pass over a layer (or the head) accumulates its gradients in a float32
  // window that starts from the stored ones and is rounded back once, and
  // the embedding's backward sums each row in float32 and rounds it once,
  // so one micro-batch's gradient is its float32 value rounded (tied rows
  // twice: after the head, after the embedding); micro-batches then add up in
  // bf16 (a rounding each), and the sum over data-parallel replicas is taken in
  // float32 and rounded once. Half the gradients' bytes. REQUIRES:
  // bf16_weight_storage.
  bool bf16_gradients = false;

  int64_t head_dim() const { return d_model / heads; }
  // The shared experts' hidden units together; 0 without them.
  int64_t shared_hidden() const { return shared_experts * shared_ffn_hidden; }
  // The width of k and of v: kv_heads heads of head_dim.
  int64_t kv_width() const { return kv_heads * head_dim(); }
  // One token's row of q, k and v, side by side (wq, wk and wv's outputs).
  int64_t qkv_width() const { return d_model + 2 * kv_width(); }
  // wq, wk, wv and wo's elements: one layer's attention weights.
  int64_t attention_weight_elements() const {
    return (qkv_width() + d_model) * d_model;
  }
};

// REQUIRES: `spec` passed ValidateJobSpec. precision: auto is taken as
// bf16, the precision it may run in with the least memory (planning an
// unchosen auto spec; a run chooses first, plan/precision_choice.h).
ModelConfig ModelConfigFromSpec(const v1::JobSpec& spec);

// "bf16" or "fp32": the model's matrix products.
inline const char* PrecisionName(const ModelConfig& config) {
  return config.matmul_precision == kernels::GemmPrecision::kBf16 ? "bf16"
                                                                  : "fp32";
}

// The device scratch a backend holds for the model's bf16 products
// (kernels::Ops::SetMatmulStagingBytes), 0 under fp32: room for four of its
// largest weight matrices in bf16, a whole number of MiB, between 1 and 64
// MiB. The weights' per-pass copies are read in place, so it holds the
// float32 operands' tiles; one weight's room instead of four made the
// example model 3.5-6.5% slower (docs/BENCHMARKS.md, "The bf16 staging's
// size"). Component `other` of
// the device pool, from the first bf16 product on.
int64_t MatmulStagingBytes(const ModelConfig& config);

// The element type of the activations that only the projections' products
// read: the attention block's and the head's normed inputs (Ring-DTP's
// travelling hidden blocks too), the experts' rows (dispatched so), their
// hidden layer and its backward's gate and up gradients. bf16 under bf16
// products, which would round them to
// it anyway: the same loss and gradients in half the bytes. float32 under
// fp32.
DType ProductInputType(const ModelConfig& config);

// The element type of activations that float32 math also reads, stored
// rounded under bf16 products as the field does (attention's q, k, v and its
// output, the layer boundaries, the experts' pre-activations and outputs,
// the head's logits; and of one gradient, the experts' inputs', on its way
// back to the tokens): a lossy storage, unlike ProductInputType's. Each value
// is rounded once, where it is made, and every reader (the products and the
// float32 math) sees the same rounded value, so a recompute reproduces it
// bitwise. float32 under fp32.
DType RoundedActivationType(const ModelConfig& config);

// The vocabulary block of Ring-DTP (schedules.ring_dtp) for a model.
int64_t RingDtpVocabBlock(int64_t d_model, int64_t vocab);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_MODEL_CONFIG_H_
