// The only code that includes SentencePiece's headers. Debian's
// sentencepiece 0.1.97 declares `absl::string_view` as std::string_view,
// which collides with Debian's abseil (ABSL_OPTION_USE_STD_STRING_VIEW 0), so
// no translation unit may include both. This header and its .cc use only the
// standard library; errors come back as text for the caller to wrap.
// Internal to engine/data: use tokenizer.h and tokenizer_trainer.h.
#ifndef PLATEAU_ENGINE_DATA_SENTENCEPIECE_BRIDGE_H_
#define PLATEAU_ENGINE_DATA_SENTENCEPIECE_BRIDGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace plateau::engine::spm_bridge {

// Stores the next training sentence in *sentence and returns true, or
// returns false when there are no more.
using NextSentence = std::function<bool(std::string* sentence)>;

// Seeds SentencePiece's (process-wide) random generator with `seed`, then
// runs SentencePieceTrainer::Train with the command-line style
// `trainer_args` on the sentences `next_sentence` yields. On success stores
// the serialized model in *serialized_model and returns true; else stores
// SentencePiece's message in *error and returns false.
bool TrainModel(const std::string& trainer_args, uint32_t seed,
                const NextSentence& next_sentence,
                std::string* serialized_model, std::string* error);

// A loaded SentencePieceProcessor. Thread-safe after a successful Load().
class Processor {
 public:
  Processor();
  ~Processor();
  Processor(const Processor&) = delete;
  Processor& operator=(const Processor&) = delete;

  bool LoadFromSerializedModel(const std::string& serialized_model,
                               std::string* error);
  int32_t piece_count() const;
  // -1 where the model has no such piece.
  int32_t eos_id() const;
  int32_t bos_id() const;
  int32_t unk_id() const;
  // The piece's text. REQUIRES: 0 <= id < piece_count().
  std::string IdToPiece(int32_t id) const;
  bool Encode(const char* text, size_t text_bytes, std::vector<int>* ids,
              std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* error) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plateau::engine::spm_bridge

#endif  // PLATEAU_ENGINE_DATA_SENTENCEPIECE_BRIDGE_H_
