// A trained SentencePiece model (tokenizer.model) for encoding and decoding
// text. Immutable after Load(); safe to use from several threads at once.
#ifndef PLATEAU_ENGINE_DATA_TOKENIZER_H_
#define PLATEAU_ENGINE_DATA_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace plateau::engine {

namespace spm_bridge {
class Processor;
}  // namespace spm_bridge

class Tokenizer {
 public:
  // Loads a model file written by TrainTokenizer (or any SentencePiece
  // model).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& model_path);
  // `serialized_model` is the content of a model file; `name` is used in
  // error messages.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSerializedModel(
      const std::string& serialized_model, const std::string& name);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Number of token ids: every id is in [0, vocab_size()).
  int64_t vocab_size() const { return vocab_size_; }
  // The end-of-document id, or -1 if the model has none.
  int32_t eos_id() const { return eos_id_; }
  // The beginning-of-sequence and unknown ids, -1 where the model has none.
  int32_t bos_id() const { return bos_id_; }
  int32_t unk_id() const { return unk_id_; }
  // The text of piece `id` ("</s>" for the end of document of a model
  // TrainTokenizer wrote). REQUIRES: 0 <= id < vocab_size().
  std::string Piece(int32_t id) const;

  // Appends the ids of `text` to *ids (no EOS is added).
  absl::Status Encode(const std::string& text, std::vector<int32_t>* ids) const;
  // Error if any id is outside [0, vocab_size()).
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

 private:
  Tokenizer(std::unique_ptr<spm_bridge::Processor> processor, std::string name);

  std::unique_ptr<spm_bridge::Processor> processor_;
  std::string name_;
  int64_t vocab_size_;
  int32_t eos_id_;
  int32_t bos_id_;
  int32_t unk_id_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_TOKENIZER_H_
