#include "engine/data/tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "engine/data/sentencepiece_bridge.h"

namespace plateau::engine {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& model_path) {
  absl::StatusOr<std::string> serialized_model = ReadFileToString(model_path);
  if (!serialized_model.ok()) return serialized_model.status();
  return FromSerializedModel(*serialized_model, model_path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSerializedModel(
    const std::string& serialized_model, const std::string& name) {
  auto processor = std::make_unique<spm_bridge::Processor>();
  std::string error;
  if (!processor->LoadFromSerializedModel(serialized_model, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a valid SentencePiece model: ", error));
  }
  if (processor->piece_count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": SentencePiece model has no pieces"));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(processor), name));
}

Tokenizer::Tokenizer(std::unique_ptr<spm_bridge::Processor> processor,
                     std::string name)
    : processor_(std::move(processor)),
      name_(std::move(name)),
      vocab_size_(processor_->piece_count()),
      eos_id_(processor_->eos_id()),
      bos_id_(processor_->bos_id()),
      unk_id_(processor_->unk_id()) {}

Tokenizer::~Tokenizer() = default;

std::string Tokenizer::Piece(int32_t id) const {
  return processor_->IdToPiece(id);
}

absl::Status Tokenizer::Encode(const std::string& text,
                               std::vector<int32_t>* ids) const {
  std::vector<int> text_ids;
  std::string error;
  if (!processor_->Encode(text.data(), text.size(), &text_ids, &error)) {
    return absl::InternalError(
        absl::StrCat(name_, ": encoding failed: ", error));
  }
  ids->insert(ids->end(), text_ids.begin(), text_ids.end());
  return absl::OkStatus();
}

absl::StatusOr<std::string> Tokenizer::Decode(
    const std::vector<int32_t>& ids) const {
  std::vector<int> text_ids(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": cannot decode token id ", ids[i], " at index ",
                       i, ": the vocabulary has ", vocab_size_, " ids"));
    }
    text_ids[i] = ids[i];
  }
  std::string text;
  std::string error;
  if (!processor_->Decode(text_ids, &text, &error)) {
    return absl::InternalError(
        absl::StrCat(name_, ": decoding failed: ", error));
  }
  return text;
}

}  // namespace plateau::engine
