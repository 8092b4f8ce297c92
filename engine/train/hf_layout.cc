#include "engine/train/hf_layout.h"

#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/parameter_layout.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

// How a transformers architecture names what differs between the two.
struct HfArchitecture {
  const char* class_name;
  const char* model_type;
  // The MoE block's module in a layer.
  const char* moe_module;
  // Plateau's w1, w2 and w3 (the gate, down and up projections).
  const char* expert_matrices[3];
  // Qwen3MoeConfig's keys (num_experts, moe_intermediate_size, ...), else
  // MixtralConfig's.
  bool qwen3_config;
};

constexpr HfArchitecture kMixtral = {"MixtralForCausalLM",
                                     "mixtral",
                                     "block_sparse_moe",
                                     {"w1", "w2", "w3"},
                                     /*qwen3_config=*/false};
constexpr HfArchitecture kQwen3Moe = {"Qwen3MoeForCausalLM",
                                      "qwen3_moe",
                                      "mlp",
                                      {"gate_proj", "down_proj", "up_proj"},
                                      /*qwen3_config=*/true};

const HfArchitecture& ArchitectureOf(const ModelConfig& config) {
  return config.qk_norm ? kQwen3Moe : kMixtral;
}

// A float32 setting as the decimal it was written as (1e-05, not the
// 9.999999747378752e-06 its widening prints).
double WrittenValue(float value) {
  double written = 0.0;
  return absl::SimpleAtod(absl::StrCat(value), &written) ? written : value;
}

// An id, or null for none (-1).
nlohmann::ordered_json IdOrNull(int32_t id) {
  if (id < 0) return nullptr;
  return id;
}

}  // namespace

std::string HfArchitectureName(const ModelConfig& config) {
  return ArchitectureOf(config).class_name;
}

std::string WhyNoHfArchitecture(const ModelConfig& config,
                                bool starting_weights) {
  std::vector<std::string> reasons;
  if (config.expert_bias && !starting_weights) {
    reasons.push_back(
        "model.balancing: bias chooses experts by a per-expert bias that "
        "neither MixtralForCausalLM nor Qwen3MoeForCausalLM has");
  }
  if (config.router_score == kernels::RouterScore::kSigmoid) {
    reasons.push_back(
        "model.router: sigmoid scores experts as neither MixtralForCausalLM "
        "nor Qwen3MoeForCausalLM does (both use a softmax)");
  }
  if (config.shared_experts > 0) {
    reasons.push_back(
        "model.shared_experts: neither MixtralForCausalLM nor "
        "Qwen3MoeForCausalLM has shared experts (Qwen2-MoE gates its shared "
        "expert, and DeepSeek-V3's sit beside latent attention)");
  }
  if (reasons.empty()) return "";
  return absl::StrCat(absl::StrJoin(reasons, "; "),
                      "; such a model has no Hugging Face architecture");
}

std::vector<HfTensorName> HfTensorNames(const ModelConfig& config) {
  const HfArchitecture& architecture = ArchitectureOf(config);
  std::vector<HfTensorName> names;
  const auto whole = [&](std::string plateau_name, std::string hf_name) {
    names.push_back({std::move(hf_name), std::move(plateau_name), -1, {}});
  };
  whole("embed.weight", "model.embed_tokens.weight");
  for (int64_t i = 0; i < config.layers; ++i) {
    const std::string ours = absl::StrCat("layers.", i, ".");
    const std::string theirs = absl::StrCat("model.layers.", i, ".");
    whole(ours + "attn_norm.weight", theirs + "input_layernorm.weight");
    for (const char* projection : {"q", "k", "v", "o"}) {
      whole(absl::StrCat(ours, "attn.w", projection, ".weight"),
            absl::StrCat(theirs, "self_attn.", projection, "_proj.weight"));
    }
    if (config.qk_norm) {
      whole(ours + "attn.q_norm.weight", theirs + "self_attn.q_norm.weight");
      whole(ours + "attn.k_norm.weight", theirs + "self_attn.k_norm.weight");
    }
    whole(ours + "moe_norm.weight", theirs + "post_attention_layernorm.weight");
    const std::string moe = absl::StrCat(theirs, architecture.moe_module, ".");
    whole(ours + "moe.router.weight", moe + "gate.weight");
    for (int m = 0; m < 3; ++m) {
      for (int64_t e = 0; e < config.experts; ++e) {
        names.push_back(
            {absl::StrCat(moe, "experts.", e, ".",
                          architecture.expert_matrices[m], ".weight"),
             absl::StrCat(ours, "moe.experts.w", m + 1),
             e,
             {}});
      }
    }
  }
  whole("final_norm.weight", "model.norm.weight");
  // Tied, transformers' lm_head is embed_tokens, and save_pretrained
  // leaves it out.
  if (!config.tie_embeddings) whole("lm_head.weight", "lm_head.weight");
  const ParameterLayout whole_model(config);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ParameterInfo& info : whole_model.parameters()) {
    shapes[info.name] = info.global_shape;
  }
  for (HfTensorName& name : names) {
    name.shape = shapes.at(name.plateau_name);
    // A bank [experts, rows, columns] is one [rows, columns] matrix an
    // expert.
    if (name.expert >= 0) name.shape.erase(name.shape.begin());
  }
  return names;
}

std::string HfConfigJson(const ModelConfig& config,
                         const HfTokenizerIds* tokenizer) {
  const HfArchitecture& architecture = ArchitectureOf(config);
  nlohmann::ordered_json json;
  json["architectures"] = {architecture.class_name};
  json["model_type"] = architecture.model_type;
  json["vocab_size"] = config.vocab;
  json["hidden_size"] = config.d_model;
  // Qwen3-MoE's dense MLP width, which only its mlp_only_layers (none here)
  // use, is the experts' as well.
  json["intermediate_size"] = config.ffn_hidden;
  json["num_hidden_layers"] = config.layers;
  json["num_attention_heads"] = config.heads;
  json["num_key_value_heads"] = config.kv_heads;
  json["head_dim"] = config.head_dim();
  json["hidden_act"] = "silu";
  json["max_position_embeddings"] = config.seq_len;
  json["rms_norm_eps"] = WrittenValue(config.rms_epsilon);
  json["rope_theta"] = config.rope_theta;
  if (architecture.qwen3_config) {
    json["rope_scaling"] = nullptr;
    json["attention_bias"] = false;
    json["use_sliding_window"] = false;
    json["max_window_layers"] = config.layers;
    json["decoder_sparse_step"] = 1;
    json["mlp_only_layers"] = nlohmann::ordered_json::array();
    json["moe_intermediate_size"] = config.ffn_hidden;
    json["num_experts"] = config.experts;
    // Plateau renormalises the chosen experts' probabilities.
    json["norm_topk_prob"] = true;
  } else {
    json["num_local_experts"] = config.experts;
  }
  json["num_experts_per_tok"] = config.top_k;
  json["router_aux_loss_coef"] =
      WrittenValue(config.load_balancing_coefficient);
  json["output_router_logits"] = false;
  json["sliding_window"] = nullptr;
  json["attention_dropout"] = 0.0;
  if (tokenizer != nullptr) {
    json["bos_token_id"] = IdOrNull(tokenizer->bos_id);
    json["eos_token_id"] = IdOrNull(tokenizer->eos_id);
  }
  json["tie_word_embeddings"] = config.tie_embeddings;
  json["use_cache"] = true;
  json["torch_dtype"] = "float32";
  return json.dump(2) + "\n";
}

}  // namespace plateau::engine
