// How Plateau's model is laid out as a transformers architecture, for
// export (hf_export.h) and import (hf_model_directory.h) alike. The model of
// docs/ARCHITECTURE.md section 8 (softmax top-k routing renormalised over
// the chosen experts, SwiGLU experts, RMSNorm, rotate-half rotary
// embedding, grouped-query attention, the head tied or not) is
// MixtralForCausalLM;
// with QK-norm (a per-head RMSNorm of q and k before the rotation) it is
// Qwen3MoeForCausalLM (norm_topk_prob true). Their tensor names:
// model.embed_tokens.weight; model.layers.i.{input_layernorm,
// post_attention_layernorm}.weight, model.layers.i.self_attn.{q,k,v,o}_proj
// .weight, for Qwen3-MoE model.layers.i.self_attn.{q,k}_norm.weight; the
// router as model.layers.i.block_sparse_moe.gate.weight (Mixtral) or
// model.layers.i.mlp.gate.weight (Qwen3-MoE), and each expert's matrices
// (Plateau's banks [experts, rows, columns] cut by expert) as
// model.layers.i.block_sparse_moe.experts.j.{w1,w2,w3}.weight or
// model.layers.i.mlp.experts.j.{gate,down,up}_proj.weight; model.norm.weight;
// lm_head.weight, unless tied (tie_word_embeddings). The values are
// Plateau's, unpermuted (all use rotate-half).
#ifndef PLATEAU_ENGINE_TRAIN_HF_LAYOUT_H_
#define PLATEAU_ENGINE_TRAIN_HF_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_config.h"

namespace plateau::engine {

// A model directory's files: the config, and the weights as shards with an
// index or as one file.
inline constexpr char kHfConfigFileName[] = "config.json";
inline constexpr char kHfIndexFileName[] = "model.safetensors.index.json";
inline constexpr char kHfSingleFileName[] = "model.safetensors";

// What an exported tokenizer tells config.json; -1: the tokenizer has no
// such piece.
struct HfTokenizerIds {
  int64_t vocab_size = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

// "MixtralForCausalLM" or "Qwen3MoeForCausalLM": the architecture `config`
// is laid out as.
std::string HfArchitectureName(const ModelConfig& config);

// Why `config`'s model computes what neither architecture does, naming the
// spec's options; "" when it has an architecture. The sigmoid router and
// shared experts always stand in the way. The expert bias of
// `balancing: bias` does for trained weights, but not for `starting_weights`
// (weights to train from), where it is zero and so chooses as the plain
// router does.
std::string WhyNoHfArchitecture(const ModelConfig& config,
                                bool starting_weights);

// One tensor of transformers' state dict and where it is in Plateau's: the
// whole of `plateau_name`, or expert `expert`'s matrix of that bank.
struct HfTensorName {
  std::string hf_name;
  std::string plateau_name;
  int64_t expert = -1;         // -1: the whole tensor
  std::vector<int64_t> shape;  // transformers' tensor's
};

// The state dict of `config`'s model, in transformers' order. Every weight
// of the model is in it but the expert bias.
std::vector<HfTensorName> HfTensorNames(const ModelConfig& config);

// config.json of `config`'s architecture, with a tokenizer's ids when it
// is given (else no bos_token_id and eos_token_id).
std::string HfConfigJson(const ModelConfig& config,
                         const HfTokenizerIds* tokenizer);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_HF_LAYOUT_H_
