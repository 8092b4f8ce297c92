#include "engine/data/tokenizer_trainer.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file_util.h"
#include "engine/data/sentencepiece_bridge.h"

namespace plateau::engine {
namespace {

// Yields the training sentences: the non-blank lines of the documents, long
// lines cut into pieces of at most kMaxTrainingSentenceBytes (SentencePiece
// would otherwise drop them), stopping after `max_sentences`. An error of
// the documents ends the sentences; status() has it.
class TrainingSentences {
 public:
  TrainingSentences(const DocumentSource& documents, int64_t max_sentences)
      : documents_(documents), max_sentences_(max_sentences) {}

  bool Next(std::string* sentence) {
    while (yielded_sentences_ < max_sentences_) {
      if (rest_of_line_.empty() && !NextLine()) return false;
      const absl::string_view piece = CutPiece();
      if (absl::StripAsciiWhitespace(piece).empty()) continue;
      sentence->assign(piece.data(), piece.size());
      ++yielded_sentences_;
      return true;
    }
    return false;
  }

  const absl::Status& status() const { return status_; }

 private:
  // Moves to the next line of the documents; false after the last one.
  bool NextLine() {
    while (true) {
      if (line_start_ >= document_.size()) {
        absl::StatusOr<bool> more = documents_(&document_);
        if (!more.ok()) status_ = more.status();
        if (!more.ok() || !*more) return false;
        line_start_ = 0;
        continue;
      }
      size_t line_end = document_.find('\n', line_start_);
      if (line_end == std::string::npos) line_end = document_.size();
      rest_of_line_ = absl::string_view(document_.data() + line_start_,
                                        line_end - line_start_);
      line_start_ = line_end + 1;
      if (!rest_of_line_.empty()) return true;
    }
  }

  // Takes the next at most kMaxTrainingSentenceBytes of the line, cut after
  // the last space when there is one, else at a UTF-8 character boundary.
  absl::string_view CutPiece() {
    size_t cut = rest_of_line_.size();
    if (cut > static_cast<size_t>(kMaxTrainingSentenceBytes)) {
      cut = kMaxTrainingSentenceBytes;
      const size_t space = rest_of_line_.rfind(' ', cut - 1);
      if (space != absl::string_view::npos && space > 0) {
        cut = space + 1;
      } else {
        while (cut > 1 && (rest_of_line_[cut] & 0xc0) == 0x80) --cut;
      }
    }
    const absl::string_view piece = rest_of_line_.substr(0, cut);
    rest_of_line_.remove_prefix(cut);
    return piece;
  }

  const DocumentSource& documents_;
  const int64_t max_sentences_;
  std::string document_;
  size_t line_start_ = 0;
  absl::Status status_;
  absl::string_view rest_of_line_;
  int64_t yielded_sentences_ = 0;
};

}  // namespace

absl::StatusOr<std::string> TrainTokenizerModel(
    const DocumentSource& documents, const TokenizerTrainingOptions& options) {
  if (options.vocab_size <= 0 ||
      options.vocab_size > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer vocab_size must be in [1, 2^31), got ", options.vocab_size));
  }
  if (options.num_threads <= 0 || options.max_training_sentences <= 0) {
    return absl::InvalidArgumentError(
        "tokenizer num_threads and max_training_sentences must be positive");
  }
  // Identity normalization and kept whitespace make decoding give back the
  // input bytes; byte_fallback and full character coverage make every text
  // encodable. Input is read in order (no shuffling): deterministic.
  const std::string trainer_args = absl::StrCat(
      "--model_type=bpe --vocab_size=", options.vocab_size,
      " --byte_fallback=true --character_coverage=1.0"
      " --normalization_rule_name=identity --remove_extra_whitespaces=false"
      " --num_threads=",
      options.num_threads,
      " --input_sentence_size=", options.max_training_sentences,
      " --shuffle_input_sentence=false --max_sentence_length=",
      kMaxTrainingSentenceBytes, " --minloglevel=2");
  TrainingSentences sentences(documents, options.max_training_sentences);
  std::string serialized_model;
  std::string error;
  const bool trained = spm_bridge::TrainModel(
      trainer_args, options.seed,
      [&sentences](std::string* sentence) { return sentences.Next(sentence); },
      &serialized_model, &error);
  if (!sentences.status().ok()) return sentences.status();
  if (!trained) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training the tokenizer with vocab_size ", options.vocab_size,
        " failed (the vocabulary holds 3 special ids, 256 byte ids, every "
        "distinct character of the text, and merges the text can fill): ",
        error));
  }
  return serialized_model;
}

absl::Status TrainTokenizer(const DocumentSource& documents,
                            const TokenizerTrainingOptions& options,
                            const std::string& output_directory) {
  absl::StatusOr<std::string> serialized_model =
      TrainTokenizerModel(documents, options);
  if (!serialized_model.ok()) return serialized_model.status();
  return WriteFileSynced(
      absl::StrCat(output_directory, "/", kTokenizerFileName),
      serialized_model->data(), serialized_model->size());
}

}  // namespace plateau::engine
