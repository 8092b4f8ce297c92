#include "engine/train/hf_model_directory.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "engine/train/hf_layout.h"
#include "kernels/tiered_update.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

// A directory of a whole different model would list every tensor.
constexpr size_t kMostProblemsListed = 20;

bool IsFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string Shown(const nlohmann::json& value) { return value.dump(); }

// The key's value; null when it is absent.
nlohmann::json Get(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  return found == object.end() ? nlohmann::json() : *found;
}

absl::Status Problems(const std::string& what,
                      const std::vector<std::string>& problems) {
  std::vector<std::string> listed(
      problems.begin(),
      problems.begin() + std::min(problems.size(), kMostProblemsListed));
  if (problems.size() > kMostProblemsListed) {
    listed.push_back(
        absl::StrCat("and ", problems.size() - kMostProblemsListed, " more"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ":\n  ", absl::StrJoin(listed, "\n  ")));
}

// config.json against the spec's model: the keys that set a shape or
// change what the model computes. Every other key (the token ids, dtype,
// max_position_embeddings, the training-only coefficients) is free.
std::vector<std::string> ConfigProblems(const nlohmann::json& found,
                                        const ModelConfig& config) {
  const nlohmann::json expected =
      nlohmann::json::parse(HfConfigJson(config, /*tokenizer=*/nullptr));
  const std::string architecture = HfArchitectureName(config);
  const nlohmann::json architectures = Get(found, "architectures");
  if (!architectures.is_array() || architectures.size() != 1 ||
      architectures[0] != architecture) {
    const ModelConfig other = [&] {
      ModelConfig flipped = config;
      flipped.qk_norm = !config.qk_norm;
      return flipped;
    }();
    if (architectures.is_array() && architectures.size() == 1 &&
        architectures[0] == HfArchitectureName(other)) {
      return {absl::StrCat(
          "architectures is ", Shown(architectures),
          ", but the spec's model is ", architecture,
          ": set model.qk_norm: ", other.qk_norm ? "true" : "false")};
    }
    return {absl::StrCat("architectures is ", Shown(architectures),
                         "; Plateau reads MixtralForCausalLM and "
                         "Qwen3MoeForCausalLM, and the spec's model is ",
                         architecture)};
  }
  std::vector<std::string> problems;
  const bool qwen3 = config.qk_norm;
  // Keys the spec sets, and the field that sets each.
  const std::pair<const char*, const char*> spec_keys[] = {
      {"vocab_size", "model.vocab"},
      {"hidden_size", "model.d_model"},
      {"num_hidden_layers", "model.layers"},
      {"num_attention_heads", "model.heads"},
      {"num_key_value_heads", "model.kv_heads"},
      {qwen3 ? "num_experts" : "num_local_experts", "model.experts"},
      {"num_experts_per_tok", "model.top_k"},
      {qwen3 ? "moe_intermediate_size" : "intermediate_size",
       "model.ffn_hidden"},
      {"rope_theta", "model.rope_theta"},
      {"rms_norm_eps", "model.rms_epsilon"},
  };
  for (const auto& [key, field] : spec_keys) {
    const nlohmann::json value = Get(found, key);
    if (value.is_null()) {
      problems.push_back(absl::StrCat(key, " is missing"));
    } else if (!value.is_number() ||
               value.get<double>() != expected[key].get<double>()) {
      problems.push_back(absl::StrCat(key, " is ", Shown(value), ", but ",
                                      field, " is ", Shown(expected[key])));
    }
  }
  // Keys Plateau's model fixes, and what it does instead.
  const auto fixed = [&](const char* key, bool holds,
                         const std::string& instead) {
    if (!holds) {
      problems.push_back(absl::StrCat(
          key, " is ", found.contains(key) ? Shown(Get(found, key)) : "missing",
          "; ", instead));
    }
  };
  const auto absent_or = [&](const char* key, const nlohmann::json& value) {
    return !found.contains(key) || Get(found, key) == value;
  };
  // Absent or null, transformers takes hidden_size / num_attention_heads.
  if (!Get(found, "head_dim").is_null()) {
    fixed("head_dim", Get(found, "head_dim") == expected["head_dim"],
          absl::StrCat("Plateau's heads are model.d_model / model.heads = ",
                       config.head_dim(), " wide"));
  }
  fixed("hidden_act", Get(found, "hidden_act") == "silu",
        "Plateau's experts are SwiGLU (silu)");
  // Absent, both architectures' configs untie them.
  const nlohmann::json tied = found.contains("tie_word_embeddings")
                                  ? Get(found, "tie_word_embeddings")
                                  : nlohmann::json(false);
  if (tied != config.tie_embeddings) {
    problems.push_back(absl::StrCat(
        "tie_word_embeddings is ",
        found.contains("tie_word_embeddings") ? Shown(tied) : "missing (false)",
        ", but model.tie_embeddings is ",
        config.tie_embeddings ? "true" : "false"));
  }
  fixed("rope_scaling", absent_or("rope_scaling", nullptr),
        "Plateau's rotary embedding is unscaled");
  if (qwen3) {
    fixed("norm_topk_prob", Get(found, "norm_topk_prob") == true,
          "Plateau renormalises the chosen experts' probabilities");
    fixed("mlp_only_layers",
          absent_or("mlp_only_layers", nlohmann::json::array()),
          "every Plateau layer is a mixture of experts");
    fixed("decoder_sparse_step", absent_or("decoder_sparse_step", 1),
          "every Plateau layer is a mixture of experts");
    fixed("use_sliding_window", absent_or("use_sliding_window", false),
          "Plateau's attention is full causal attention");
    fixed("attention_bias", absent_or("attention_bias", false),
          "Plateau's projections have no bias");
  } else {
    const nlohmann::json window = Get(found, "sliding_window");
    fixed("sliding_window",
          window.is_null() || (window.is_number_integer() &&
                               window.get<int64_t>() >= config.seq_len),
          "Plateau's attention is full causal attention (a window of at "
          "least model.seq_len is the same)");
  }
  return problems;
}

// Transformers' name -> the file holding it.
using WeightMap = std::map<std::string, std::string>;

// The index's weight map; empty when there is only model.safetensors.
absl::StatusOr<WeightMap> ReadWeightMap(const std::string& directory) {
  const std::string index_path = absl::StrCat(directory, "/", kHfIndexFileName);
  WeightMap weight_map;
  if (!IsFile(index_path)) {
    if (!IsFile(absl::StrCat(directory, "/", kHfSingleFileName))) {
      return absl::NotFoundError(absl::StrCat(directory, " holds neither ",
                                              kHfIndexFileName, " nor ",
                                              kHfSingleFileName));
    }
    return weight_map;
  }
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(index_path));
  const nlohmann::json index = nlohmann::json::parse(text, nullptr, false);
  const nlohmann::json map =
      index.is_object() ? Get(index, "weight_map") : nlohmann::json();
  if (!map.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, " has no weight_map object"));
  }
  for (const auto& [name, file] : map.items()) {
    if (!file.is_string() || file.get<std::string>().empty() ||
        absl::StrContains(file.get<std::string>(), "/") || file == "." ||
        file == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": ", name, " is in ", Shown(file),
                       ", not the name of a file beside the index"));
    }
    weight_map[name] = file.get<std::string>();
  }
  return weight_map;
}

// Why the tied head's copy `name` in `shard` is not the embedding's table
// as `sources` hold it; "" when it is, byte for byte.
std::string WhyNotTheEmbedding(
    const SafetensorsReader& shard, const std::string& name,
    const std::map<std::string, std::vector<const TensorEntry*>>& sources) {
  const TensorEntry* head = shard.Find(name);
  const auto embedding = sources.find("embed.weight");
  // A missing or misshapen embedding is a problem of its own.
  if (head == nullptr || embedding == sources.end()) return "";
  const TensorEntry& table = *embedding->second.front();
  if (head->dtype == table.dtype && head->shape == table.shape &&
      head->bytes == table.bytes &&
      std::memcmp(head->data, table.data, head->bytes) == 0) {
    return "";
  }
  return absl::StrCat(name,
                      " differs from model.embed_tokens.weight, but "
                      "tie_word_embeddings makes them one tensor");
}

}  // namespace

bool HfModelDirectory::IsHfModelDirectory(const std::string& directory) {
  return IsFile(absl::StrCat(directory, "/", kHfConfigFileName));
}

absl::StatusOr<std::unique_ptr<HfModelDirectory>> HfModelDirectory::Open(
    const std::string& directory, const ModelConfig& config) {
  std::unique_ptr<HfModelDirectory> opened(
      new HfModelDirectory(TrimTrailingSlashes(directory)));
  const std::string& root = opened->directory_;
  const std::string config_path = absl::StrCat(root, "/", kHfConfigFileName);
  if (!IsFile(config_path)) {
    return absl::NotFoundError(absl::StrCat(
        root, " has no ", kHfConfigFileName,
        ": not a Hugging Face model directory (save_pretrained's or "
        "plateau-worker export's)"));
  }
  if (const std::string why =
          WhyNoHfArchitecture(config, /*starting_weights=*/true);
      !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the spec's model cannot start from ", root, ": ", why));
  }
  ASSIGN_OR_RETURN(const std::string config_text,
                   ReadFileToString(config_path));
  const nlohmann::json found =
      nlohmann::json::parse(config_text, nullptr, false);
  if (!found.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, " is not a JSON object"));
  }
  if (const std::vector<std::string> problems = ConfigProblems(found, config);
      !problems.empty()) {
    return Problems(absl::StrCat(config_path, " is not the spec's model"),
                    problems);
  }

  ASSIGN_OR_RETURN(WeightMap weight_map, ReadWeightMap(root));
  std::map<std::string, const SafetensorsReader*> shard_of_file;
  const auto open_shard =
      [&](const std::string& file) -> absl::StatusOr<const SafetensorsReader*> {
    auto [slot, added] = shard_of_file.emplace(file, nullptr);
    if (added) {
      ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsReader> shard,
                       SafetensorsReader::Open(absl::StrCat(root, "/", file)));
      slot->second = shard.get();
      opened->shards_.push_back(std::move(shard));
    }
    return slot->second;
  };
  if (weight_map.empty()) {
    ASSIGN_OR_RETURN(const SafetensorsReader* single,
                     open_shard(kHfSingleFileName));
    for (const TensorEntry& entry : single->tensors()) {
      weight_map[entry.name] = kHfSingleFileName;
    }
  }
  for (const auto& [name, file] : weight_map) {
    RETURN_IF_ERROR(open_shard(file).status());
  }

  // Missing tensors are listed last: a directory of another model misses
  // most of them, and what it holds instead says more.
  std::vector<std::string> problems;
  std::vector<std::string> missing;
  std::set<std::string> expected_names;
  std::set<std::string> dtypes;
  for (const HfTensorName& name : HfTensorNames(config)) {
    expected_names.insert(name.hf_name);
    const auto mapped = weight_map.find(name.hf_name);
    const TensorEntry* entry =
        mapped == weight_map.end()
            ? nullptr
            : shard_of_file.at(mapped->second)->Find(name.hf_name);
    if (mapped == weight_map.end()) {
      missing.push_back(absl::StrCat(name.hf_name, " is missing"));
    } else if (entry == nullptr) {
      problems.push_back(absl::StrCat(name.hf_name, ": the index puts it in ",
                                      mapped->second,
                                      ", which does not hold it"));
    } else if (entry->dtype != SafetensorsDtype::kF32 &&
               entry->dtype != SafetensorsDtype::kBF16) {
      problems.push_back(absl::StrCat(name.hf_name, " is ",
                                      SafetensorsDtypeName(entry->dtype),
                                      "; Plateau reads F32 and BF16 weights"));
    } else if (entry->shape != name.shape) {
      problems.push_back(absl::StrCat(
          name.hf_name, " is [", absl::StrJoin(entry->shape, ", "),
          "], the model's [", absl::StrJoin(name.shape, ", "), "]"));
    } else {
      opened->sources_[name.plateau_name].push_back(entry);
      dtypes.insert(std::string(SafetensorsDtypeName(entry->dtype)));
    }
  }
  for (const auto& [name, file] : weight_map) {
    if (config.tie_embeddings && name == "lm_head.weight") {
      // Some writers keep the tied head's copy; transformers ties it over.
      if (const std::string why = WhyNotTheEmbedding(*shard_of_file.at(file),
                                                     name, opened->sources_);
          !why.empty()) {
        problems.push_back(why);
      }
    } else if (expected_names.count(name) == 0 &&
               !absl::EndsWith(name, ".rotary_emb.inv_freq")) {
      problems.push_back(absl::StrCat(name, " is not part of this model"));
    }
  }
  problems.insert(problems.end(), missing.begin(), missing.end());
  if (!problems.empty()) {
    return Problems(absl::StrCat(root,
                                 " does not hold the spec's model's "
                                 "weights"),
                    problems);
  }
  opened->dtypes_ = absl::StrJoin(dtypes, ", ");
  return opened;
}

bool HfModelDirectory::HasValues(const std::string& plateau_name) const {
  return sources_.count(plateau_name) > 0;
}

void HfModelDirectory::Read(const std::string& plateau_name, int64_t begin,
                            int64_t count, float* values) const {
  const std::vector<const TensorEntry*>& sources = sources_.at(plateau_name);
  const auto elements = [](const TensorEntry& entry) {
    return static_cast<int64_t>(entry.bytes /
                                SafetensorsDtypeBytes(entry.dtype));
  };
  // Every source of a bank is one expert's matrix, all the same size.
  const int64_t source_elements = elements(*sources.front());
  while (count > 0) {
    const TensorEntry& entry = *sources.at(begin / source_elements);
    const int64_t within = begin % source_elements;
    const int64_t taken = std::min(count, source_elements - within);
    const char* bytes = static_cast<const char*>(entry.data);
    // A tensor need not be aligned to its element in the file.
    if (entry.dtype == SafetensorsDtype::kF32) {
      std::memcpy(values, bytes + within * sizeof(float),
                  taken * sizeof(float));
    } else {
      for (int64_t i = 0; i < taken; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + (within + i) * sizeof(uint16_t),
                    sizeof(bits));
        values[i] = kernels::Bfloat16ToFloat(bits);
      }
    }
    begin += taken;
    count -= taken;
    values += taken;
  }
}

std::string HfModelDirectory::TokenizerModelPath() const {
  const std::string path = absl::StrCat(directory_, "/tokenizer.model");
  return IsFile(path) ? path : "";
}

}  // namespace plateau::engine
