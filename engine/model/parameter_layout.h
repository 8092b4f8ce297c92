// Where every parameter a rank holds lives in its one flat float32 buffer,
// with the names and shapes of docs/ARCHITECTURE.md section 8 (the checkpoint
// contract). Keeping all parameters (and likewise all gradients and
// optimizer moments) in one buffer lets the optimizer and gradient clipping
// run as single fused passes.
//
// The buffer holds the dense parameters first (replicated on every rank of a
// pipeline stage's data-parallel and expert-parallel groups), then the
// parameters split over the expert-parallel ranks (replicated only across
// data parallelism): the experts, and with Ring-DTP over those ranks the
// lm_head's vocabulary shard. The dense parameters that precision bf16
// reads in float32 (the norms and router) come first, so that those it
// reads rounded (the embedding, whose lookup rounds the rows it gathers,
// and the product weights) are one range of the buffer: [bf16_begin(),
// total). Each of the four regions (dense float32-only, the embedding, the
// dense product weights, split) is reduced across its group in one call. With
// tied embeddings there is no lm_head: the head reads its rows of embed.weight
// in the dense region, or on a last pipeline stage a copy of them kept outside
// the buffers (tied_head_copy_elements). A rank's expert tensors are a
// contiguous slice of the whole model's (experts are the leading dimension).
// wq, wk and wv of a layer are adjacent, so together they form one [qkv_width,
// d_model] matrix: one product instead of three. wo follows them, and a layer's
// w1, w3 and w2 are adjacent too, so that a pass's bf16 copy of a layer's
// matrices is one conversion per block (Model::LayerWeightsForPass).
#ifndef PLATEAU_ENGINE_MODEL_PARAMETER_LAYOUT_H_
#define PLATEAU_ENGINE_MODEL_PARAMETER_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/model_shard.h"

namespace plateau::engine {

// What a parameter is for; optimizers choose their treatment from this, never
// from names typed by users.
enum class ParameterRole {
  kEmbedding,
  kAttention,
  kNorm,
  kRouter,
  // The router's per-expert bias of aux-loss-free balancing: no gradient,
  // no optimizer; Model::UpdateExpertBias moves it (ModelConfig::
  // expert_bias). Initialised to zero.
  kExpertBias,
  kExpert,
  // The shared experts' matrices: dense, replicated like attention's.
  kSharedExpert,
  kHead,
};

struct ParameterInfo {
  std::string name;            // the whole model's name, e.g. layers.3....
  std::vector<int64_t> shape;  // this rank's part
  std::vector<int64_t> global_shape;  // the whole model's tensor
  // Where this rank's part starts in the whole tensor (elements; non-zero
  // only for expert tensors of an expert-parallel rank).
  int64_t global_offset = 0;
  int64_t offset = 0;  // in elements, within the flat buffer
  int64_t elements = 0;
  ParameterRole role = ParameterRole::kAttention;
  // Standard deviation of the initial normal; 0 means "initialise to one"
  // (the RMSNorm scales), or for an expert bias to zero.
  float init_std = 0.0f;
};

// Whether precision bf16 reads the parameter rounded: products read their
// weights so (attention's and the experts' matrices, the lm_head, or with
// tied embeddings the head's rows of the embedding), and the embedding's
// lookup rounds the rows it gathers. Norms and router are read in float32.
inline bool ReadRoundedInBf16(const ParameterInfo& info) {
  return info.role == ParameterRole::kEmbedding ||
         info.role == ParameterRole::kAttention ||
         info.role == ParameterRole::kSharedExpert ||
         info.role == ParameterRole::kExpert ||
         info.role == ParameterRole::kHead;
}

// Whether the optimizers update the parameter (all but an expert bias).
inline bool TrainedByOptimizer(const ParameterInfo& info) {
  return info.role != ParameterRole::kExpertBias;
}

// Offsets (in elements) of one layer's parameters.
struct LayerOffsets {
  int64_t attn_norm = 0;
  int64_t wqkv = 0;  // wq, then wk, then wv: [qkv_width, d_model]
  int64_t wo = 0;
  // QK-norm's scales [head_dim] (ModelConfig::qk_norm); -1 without it.
  int64_t q_norm = -1;
  int64_t k_norm = -1;
  int64_t moe_norm = 0;
  int64_t router = 0;
  // The router's expert bias [experts] (ModelConfig::expert_bias); -1
  // without it.
  int64_t expert_bias = -1;
  // The shared experts' w1, w3 [shared_hidden, d_model] and w2 [d_model,
  // shared_hidden], adjacent (ModelConfig::shared_experts); -1 without them.
  int64_t shared_w1 = -1;
  int64_t shared_w3 = -1;
  int64_t shared_w2 = -1;
  int64_t w1 = 0;  // [local experts, ffn_hidden, d_model]
  int64_t w3 = 0;  // [local experts, ffn_hidden, d_model]
  int64_t w2 = 0;  // [local experts, d_model, ffn_hidden]
};

class ParameterLayout {
 public:
  // The whole model.
  explicit ParameterLayout(const ModelConfig& config);
  ParameterLayout(const ModelConfig& config, const ModelShard& shard);

  const ModelShard& shard() const { return shard_; }
  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  int64_t total_elements() const { return total_elements_; }
  // The dense region is [0, dense_elements()), the expert region the rest;
  // each is padded (with elements no parameter uses) to a multiple of the
  // shard's alignment for it. The dense region's parameters that bf16
  // reads rounded are [bf16_begin(), dense_elements()), its others before
  // them; those are the embedding, then from dense_products_begin() the
  // product weights, each part padded alike. bf16 reads every parameter of
  // the expert region rounded (ReadRoundedInBf16).
  int64_t bf16_begin() const { return bf16_begin_; }
  // bf16_begin() on a shard without the embedding.
  int64_t dense_products_begin() const { return dense_products_begin_; }
  // With bf16 weight storage (ModelConfig::bf16_weight_storage) the device
  // holds [bf16_begin(), total_elements()) in bf16 (Model::
  // weight_buffers); else the whole buffer in float32.
  bool bf16_weight_storage() const { return bf16_weight_storage_; }
  // With bf16 gradient accumulation (ModelConfig::bf16_gradients) the
  // gradients of [bf16_begin(), total_elements()) are held in bf16
  // (Model::gradient_buffers).
  bool bf16_gradients() const { return bf16_gradients_; }
  int64_t dense_elements() const { return dense_elements_; }
  // REQUIRES: shard().has_embedding.
  int64_t embedding_offset() const { return embedding_offset_; }
  // `index` counts the shard's layers from 0.
  const LayerOffsets& layer(int64_t index) const { return layers_[index]; }
  // REQUIRES: shard().has_head.
  int64_t final_norm_offset() const { return final_norm_offset_; }
  // The shard's head rows: lm_head.weight's, or with tied embeddings the
  // same rows of embed.weight (there is then no lm_head.weight).
  // REQUIRES: tied_head_copy_elements() == 0.
  int64_t lm_head_offset() const { return lm_head_offset_; }
  // With tied embeddings on a last pipeline stage, which has no embedding:
  // the elements of its copy of the head rows of the first stage's
  // embed.weight, kept outside the flat buffers (Model::tied_head_weights);
  // 0 otherwise.
  int64_t tied_head_copy_elements() const { return tied_head_copy_elements_; }
  // nullptr when no parameter has that name.
  const ParameterInfo* Find(const std::string& name) const;
  // In the second region: split over the expert-parallel ranks.
  bool SplitOverExpertRanks(const ParameterInfo& info) const {
    return info.offset >= dense_elements_;
  }

 private:
  int64_t Add(std::string name, std::vector<int64_t> shape, ParameterRole role,
              float init_std);

  ModelShard shard_;
  std::vector<ParameterInfo> parameters_;
  std::vector<LayerOffsets> layers_;
  int64_t total_elements_ = 0;
  int64_t bf16_begin_ = 0;
  int64_t dense_products_begin_ = 0;
  bool bf16_weight_storage_ = false;
  bool bf16_gradients_ = false;
  int64_t dense_elements_ = 0;
  int64_t embedding_offset_ = 0;
  int64_t final_norm_offset_ = 0;
  int64_t lm_head_offset_ = 0;
  int64_t tied_head_copy_elements_ = 0;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_PARAMETER_LAYOUT_H_
