// No abseil include may appear in this file: see sentencepiece_bridge.h.
#include "engine/data/sentencepiece_bridge.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <limits>
#include <string_view>
#include <utility>

namespace plateau::engine::spm_bridge {
namespace {

// Adapts a NextSentence callback to SentencePiece's pull interface.
class CallbackSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit CallbackSentenceIterator(const NextSentence& next_sentence)
      : next_sentence_(next_sentence) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_sentence_(&sentence_); }
  const std::string& value() const override { return sentence_; }
  sentencepiece::util::Status status() const override {
    return sentencepiece::util::Status();
  }

 private:
  const NextSentence& next_sentence_;
  std::string sentence_;
  bool done_ = false;
};

}  // namespace

bool TrainModel(const std::string& trainer_args, uint32_t seed,
                const NextSentence& next_sentence,
                std::string* serialized_model, std::string* error) {
  // SentencePiece reserves the all-ones seed for "seed from random_device".
  sentencepiece::SetRandomGeneratorSeed(
      seed == std::numeric_limits<uint32_t>::max() ? 0 : seed);
  CallbackSentenceIterator sentences(next_sentence);
  const sentencepiece::util::Status status =
      sentencepiece::SentencePieceTrainer::Train(std::string_view(trainer_args),
                                                 &sentences, serialized_model);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

struct Processor::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

Processor::Processor() : impl_(std::make_unique<Impl>()) {}
Processor::~Processor() = default;

bool Processor::LoadFromSerializedModel(const std::string& serialized_model,
                                        std::string* error) {
  const sentencepiece::util::Status status =
      impl_->processor.LoadFromSerializedProto(
          std::string_view(serialized_model));
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

int32_t Processor::piece_count() const {
  return impl_->processor.GetPieceSize();
}

int32_t Processor::eos_id() const { return impl_->processor.eos_id(); }

int32_t Processor::bos_id() const { return impl_->processor.bos_id(); }

int32_t Processor::unk_id() const { return impl_->processor.unk_id(); }

std::string Processor::IdToPiece(int32_t id) const {
  return impl_->processor.IdToPiece(id);
}

bool Processor::Encode(const char* text, size_t text_bytes,
                       std::vector<int>* ids, std::string* error) const {
  const sentencepiece::util::Status status =
      impl_->processor.Encode(std::string_view(text, text_bytes), ids);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

bool Processor::Decode(const std::vector<int>& ids, std::string* text,
                       std::string* error) const {
  const sentencepiece::util::Status status = impl_->processor.Decode(ids, text);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

}  // namespace plateau::engine::spm_bridge
