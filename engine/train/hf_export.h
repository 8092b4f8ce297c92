// A model's weights in the Hugging Face layout, so that transformers and the
// tools built on it load what Plateau trained. The model of
// docs/ARCHITECTURE.md section 8 (softmax top-k routing renormalised over
// the chosen experts, SwiGLU experts, RMSNorm, rotate-half rotary
// embedding, grouped-query attention, untied head) is MixtralForCausalLM;
// with QK-norm (a per-head RMSNorm of q and k before the rotation) it is
// Qwen3MoeForCausalLM (norm_topk_prob true). The directory holds
//   config.json                          MixtralConfig's or Qwen3MoeConfig's
//                                        keys
//   model-00001-of-0000N.safetensors     the state dict, float32, in shards
//   model.safetensors.index.json         {"metadata": {"total_size": B},
//                                         "weight_map": {tensor: shard}}
// with transformers' tensor names: model.embed_tokens.weight;
// model.layers.i.{input_layernorm, post_attention_layernorm}.weight,
// model.layers.i.self_attn.{q,k,v,o}_proj.weight, for Qwen3-MoE
// model.layers.i.self_attn.{q,k}_norm.weight; the router as
// model.layers.i.block_sparse_moe.gate.weight (Mixtral) or
// model.layers.i.mlp.gate.weight (Qwen3-MoE), and each expert's matrices
// (Plateau's banks cut by expert) as
// model.layers.i.block_sparse_moe.experts.j.{w1,w2,w3}.weight or
// model.layers.i.mlp.experts.j.{gate,down,up}_proj.weight;
// model.norm.weight; lm_head.weight. The values are Plateau's, bit for bit;
// nothing is permuted (all use rotate-half).
// The training-only options (the load-balancing and z-loss coefficients)
// change no inference; the first goes to router_aux_loss_coef.
//
// With a tokenizer, its files go beside the weights
// (engine/data/hf_tokenizer.h, written by plateau-data since only it links
// SentencePiece) and its bos_token_id and eos_token_id into config.json.
//
// The directory appears atomically, as a prepared dataset does
// (common/file_util.h): written beside the output, then renamed into place.
#ifndef PLATEAU_ENGINE_TRAIN_HF_EXPORT_H_
#define PLATEAU_ENGINE_TRAIN_HF_EXPORT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

// What an exported tokenizer tells config.json; -1: the tokenizer has no
// such piece.
struct HfTokenizerIds {
  int64_t vocab_size = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

struct HfExportOptions {
  std::string output_directory;
  // A shard is closed before a tensor would take it past this (a larger
  // tensor gets a shard of its own); transformers' default is 5 GB.
  int64_t max_shard_bytes = int64_t{5} * 1000 * 1000 * 1000;
  // Replace an existing non-empty output directory.
  bool overwrite = false;
  // Unset: no tokenizer. Else writes a tokenizer's files into the given
  // (staged) directory and returns its ids. It may have fewer ids than
  // model.vocab (the embedding rows past them are never used), not more.
  std::function<absl::StatusOr<HfTokenizerIds>(const std::string& directory)>
      write_tokenizer;
};

// "MixtralForCausalLM" or "Qwen3MoeForCausalLM": the architecture a model
// exports as. A model with aux-loss-free balancing (an expert bias in the
// choice of experts), the sigmoid router or shared experts has none, and
// ExportHuggingFace refuses it.
std::string HfArchitectureName(const ModelConfig& config);

// `weights` must hold exactly the whole model's float32 tensors of
// `config` (a checkpoint's model.safetensors): INVALID_ARGUMENT naming each
// missing, unexpected or mis-shaped one, and nothing written; so too when
// write_tokenizer fails or gives more ids than the model has.
absl::Status ExportHuggingFace(const ModelConfig& config,
                               const SafetensorsReader& weights,
                               const HfExportOptions& options);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_HF_EXPORT_H_
