#include "engine/train/hf_export.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "engine/train/model_io.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

constexpr char kIndexFileName[] = "model.safetensors.index.json";

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

// Every problem of `weights` against the whole model's shapes.
absl::Status CheckWeights(const ModelConfig& config,
                          const SafetensorsReader& weights) {
  const TensorShapes expected = WeightShapes(config);
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected) {
    const TensorEntry* entry = weights.Find(name);
    if (entry == nullptr) {
      problems.push_back(absl::StrCat(name, " is missing"));
    } else if (entry->dtype != SafetensorsDtype::kF32 ||
               entry->shape != shape) {
      problems.push_back(absl::StrCat(
          name, " is ", SafetensorsDtypeName(entry->dtype), " [",
          absl::StrJoin(entry->shape, ", "), "], the model's F32 [",
          absl::StrJoin(shape, ", "), "]"));
    }
  }
  for (const TensorEntry& entry : weights.tensors()) {
    if (expected.count(entry.name) == 0) {
      problems.push_back(absl::StrCat(entry.name, " is not the model's"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      weights.path(),
      " does not hold this model's weights: ", absl::StrJoin(problems, "; ")));
}

// Transformers' state dict, as views into `weights`.
std::vector<TensorView> HfTensors(const ModelConfig& config,
                                  const SafetensorsReader& weights) {
  const HfArchitecture& architecture = ArchitectureOf(config);
  std::vector<TensorView> tensors;
  const auto whole = [&](const std::string& plateau_name, std::string hf_name) {
    const TensorEntry& entry = *weights.Find(plateau_name);
    tensors.push_back({std::move(hf_name), SafetensorsDtype::kF32, entry.shape,
                       entry.data, entry.bytes});
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
    // A bank [experts, rows, columns] is one [rows, columns] matrix an
    // expert, consecutive in memory.
    for (int m = 0; m < 3; ++m) {
      const TensorEntry& bank =
          *weights.Find(absl::StrCat(ours, "moe.experts.w", m + 1));
      const std::vector<int64_t> shape(bank.shape.begin() + 1,
                                       bank.shape.end());
      const size_t bytes = bank.bytes / static_cast<size_t>(config.experts);
      for (int64_t e = 0; e < config.experts; ++e) {
        tensors.push_back(
            {absl::StrCat(moe, "experts.", e, ".",
                          architecture.expert_matrices[m], ".weight"),
             SafetensorsDtype::kF32, shape,
             static_cast<const char*>(bank.data) + e * bytes, bytes});
      }
    }
  }
  whole("final_norm.weight", "model.norm.weight");
  whole("lm_head.weight", "lm_head.weight");
  return tensors;
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

// MixtralConfig's or Qwen3MoeConfig's keys, and an exported tokenizer's
// ids.
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
  json["tie_word_embeddings"] = false;
  json["use_cache"] = true;
  json["torch_dtype"] = "float32";
  return json.dump(2) + "\n";
}

// Writes the shards and the index into `directory`.
absl::Status WriteShards(const std::vector<TensorView>& tensors,
                         int64_t max_shard_bytes,
                         const std::string& directory) {
  std::vector<std::vector<TensorView>> shards(1);
  int64_t shard_bytes = 0;
  int64_t total_bytes = 0;
  for (const TensorView& tensor : tensors) {
    const int64_t bytes = static_cast<int64_t>(tensor.bytes);
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(tensor);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  nlohmann::ordered_json weight_map;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards.size());
    for (const TensorView& tensor : shards[s]) weight_map[tensor.name] = file;
    if (absl::Status status = WriteSafetensors(
            absl::StrCat(directory, "/", file), shards[s], {{"format", "pt"}});
        !status.ok()) {
      return status;
    }
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total_bytes}};
  index["weight_map"] = std::move(weight_map);
  const std::string text = index.dump(2) + "\n";
  return WriteFileSynced(absl::StrCat(directory, "/", kIndexFileName),
                         text.data(), text.size());
}

}  // namespace

std::string HfArchitectureName(const ModelConfig& config) {
  return ArchitectureOf(config).class_name;
}

absl::Status ExportHuggingFace(const ModelConfig& config,
                               const SafetensorsReader& weights,
                               const HfExportOptions& options) {
  if (options.output_directory.empty() || options.max_shard_bytes <= 0) {
    return absl::InvalidArgumentError(
        "export: an output directory and a positive shard size are needed");
  }
  if (config.expert_bias) {
    return absl::InvalidArgumentError(
        "export: model.balancing: bias chooses experts by a per-expert bias "
        "that neither MixtralForCausalLM nor Qwen3MoeForCausalLM has; such a "
        "model has no Hugging Face architecture to export as");
  }
  if (config.router_score == kernels::RouterScore::kSigmoid) {
    return absl::InvalidArgumentError(
        "export: model.router: sigmoid scores experts as neither "
        "MixtralForCausalLM nor Qwen3MoeForCausalLM does (both use a "
        "softmax); such a model has no Hugging Face architecture to export "
        "as");
  }
  if (config.shared_experts > 0) {
    return absl::InvalidArgumentError(
        "export: model.shared_experts: neither MixtralForCausalLM nor "
        "Qwen3MoeForCausalLM has shared experts (Qwen2-MoE gates its shared "
        "expert, and DeepSeek-V3's sit beside latent attention); such a model "
        "has no Hugging Face architecture to export as");
  }
  if (absl::Status status = CheckWeights(config, weights); !status.ok()) {
    return status;
  }
  return WriteDirectoryAtomically(
      TrimTrailingSlashes(options.output_directory), options.overwrite,
      [&](const std::string& staged) -> absl::Status {
        std::optional<HfTokenizerIds> tokenizer;
        if (options.write_tokenizer) {
          ASSIGN_OR_RETURN(tokenizer, options.write_tokenizer(staged));
          if (tokenizer->vocab_size > config.vocab) {
            return absl::InvalidArgumentError(absl::StrCat(
                "export: the tokenizer has ", tokenizer->vocab_size,
                " ids, more than the ", config.vocab,
                " of model.vocab: it is not this model's"));
          }
        }
        const std::string config_json =
            HfConfigJson(config, tokenizer ? &*tokenizer : nullptr);
        RETURN_IF_ERROR(WriteFileSynced(absl::StrCat(staged, "/config.json"),
                                        config_json.data(),
                                        config_json.size()));
        return WriteShards(HfTensors(config, weights), options.max_shard_bytes,
                           staged);
      });
}

}  // namespace plateau::engine
