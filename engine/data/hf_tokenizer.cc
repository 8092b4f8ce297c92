#include "engine/data/hf_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

// A special piece's text, or null where the tokenizer has none.
nlohmann::ordered_json PieceOrNull(const Tokenizer& tokenizer, int32_t id) {
  if (id < 0) return nullptr;
  return tokenizer.Piece(id);
}

std::string TokenizerConfigJson(const Tokenizer& tokenizer,
                                int64_t model_max_length) {
  nlohmann::ordered_json json;
  json["tokenizer_class"] = "LlamaTokenizer";
  json["model_max_length"] = model_max_length;
  json["add_bos_token"] = false;
  json["add_eos_token"] = false;
  json["legacy"] = true;
  json["unk_token"] = PieceOrNull(tokenizer, tokenizer.unk_id());
  json["bos_token"] = PieceOrNull(tokenizer, tokenizer.bos_id());
  json["eos_token"] = PieceOrNull(tokenizer, tokenizer.eos_id());
  json["pad_token"] = nullptr;
  json["clean_up_tokenization_spaces"] = false;
  json["sp_model_kwargs"] = nlohmann::ordered_json::object();
  return json.dump(2) + "\n";
}

std::string SpecialTokensMapJson(const Tokenizer& tokenizer) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto& [key, id] : {std::pair{"unk_token", tokenizer.unk_id()},
                                std::pair{"bos_token", tokenizer.bos_id()},
                                std::pair{"eos_token", tokenizer.eos_id()}}) {
    if (id >= 0) json[key] = tokenizer.Piece(id);
  }
  return json.dump(2) + "\n";
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileSynced(path, text.data(), text.size());
}

}  // namespace

absl::Status WriteHfTokenizer(const Tokenizer& tokenizer,
                              const std::string& serialized_model,
                              int64_t model_max_length,
                              const std::string& directory) {
  RETURN_IF_ERROR(
      WriteText(absl::StrCat(directory, "/tokenizer.model"), serialized_model));
  RETURN_IF_ERROR(WriteText(absl::StrCat(directory, "/tokenizer_config.json"),
                            TokenizerConfigJson(tokenizer, model_max_length)));
  return WriteText(absl::StrCat(directory, "/special_tokens_map.json"),
                   SpecialTokensMapJson(tokenizer));
}

}  // namespace plateau::engine
