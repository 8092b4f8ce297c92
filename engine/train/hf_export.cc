#include "engine/train/hf_export.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "engine/train/model_io.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

// Transformers' state dict, read from `weights` (the model's whole
// tensors) into `values`, as views into it.
absl::StatusOr<std::vector<TensorView>> HfTensors(
    const ModelConfig& config, const TensorSource& weights,
    std::vector<std::vector<float>>& values) {
  const std::map<std::string, TensorInfo> stored = weights.Tensors();
  const std::vector<HfTensorName> names = HfTensorNames(config);
  values.resize(names.size());
  std::vector<TensorView> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    const HfTensorName& name = names[i];
    int64_t elements = ShapeElements(stored.at(name.plateau_name).shape);
    int64_t first = 0;
    if (name.expert >= 0) {  // a bank's experts are consecutive in memory
      elements /= config.experts;
      first = name.expert * elements;
    }
    values[i].resize(static_cast<size_t>(elements));
    RETURN_IF_ERROR(
        weights.Read(name.plateau_name, first, elements, values[i].data()));
    tensors.push_back({name.hf_name, SafetensorsDtype::kF32, name.shape,
                       values[i].data(),
                       static_cast<size_t>(elements) * sizeof(float)});
  }
  return tensors;
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
  return WriteFileSynced(absl::StrCat(directory, "/", kHfIndexFileName),
                         text.data(), text.size());
}

}  // namespace

absl::Status ExportHuggingFace(const ModelConfig& config,
                               const TensorSource& weights,
                               const HfExportOptions& options) {
  if (options.output_directory.empty() || options.max_shard_bytes <= 0) {
    return absl::InvalidArgumentError(
        "export: an output directory and a positive shard size are needed");
  }
  if (const std::string why = WhyNoHfArchitecture(config,
                                                  /*starting_weights=*/false);
      !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("export: ", why));
  }
  RETURN_IF_ERROR(CheckWholeTensors(weights, WeightShapes(config)));
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
        RETURN_IF_ERROR(
            WriteFileSynced(absl::StrCat(staged, "/", kHfConfigFileName),
                            config_json.data(), config_json.size()));
        std::vector<std::vector<float>> values;
        ASSIGN_OR_RETURN(const std::vector<TensorView> tensors,
                         HfTensors(config, weights, values));
        return WriteShards(tensors, options.max_shard_bytes, staged);
      });
}

}  // namespace plateau::engine
