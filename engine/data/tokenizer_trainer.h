// Training a SentencePiece BPE tokenizer on documents, read as a stream.
//
// The model is byte-fallback BPE with identity normalization and every
// character of the training text in the vocabulary, so any UTF-8 text
// encodes without <unk> and decodes back to the same bytes. Ids 0, 1, 2 are
// <unk>, <s>, </s> (EOS); 256 ids are the byte pieces. Training reads the
// non-blank lines of the documents (lines longer than
// kMaxTrainingSentenceBytes are cut at a space), in order, up to
// max_training_sentences of them; the same documents and options give the
// same model, byte for byte.
#ifndef PLATEAU_ENGINE_DATA_TOKENIZER_TRAINER_H_
#define PLATEAU_ENGINE_DATA_TOKENIZER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace plateau::engine {

inline constexpr char kTokenizerFileName[] = "tokenizer.model";
inline constexpr int64_t kMaxTrainingSentenceBytes = 8192;

// The next document into *document: true; false after the last.
using DocumentSource = std::function<absl::StatusOr<bool>(std::string*)>;

struct TokenizerTrainingOptions {
  // Number of ids, special and byte pieces included. SentencePiece rejects a
  // size below 259 + the number of distinct characters, or above what the
  // text can fill.
  int64_t vocab_size = 0;
  uint32_t seed = 0;
  int32_t num_threads = 2;
  int64_t max_training_sentences = 2'000'000;
};

// Returns the serialized model (the content of a tokenizer.model file).
// The documents are read up to max_training_sentences lines (SentencePiece
// holds those); an error of `documents` is returned as it is.
absl::StatusOr<std::string> TrainTokenizerModel(
    const DocumentSource& documents, const TokenizerTrainingOptions& options);

// Trains and writes <output_directory>/tokenizer.model (fsynced). The
// directory must exist.
absl::Status TrainTokenizer(const DocumentSource& documents,
                            const TokenizerTrainingOptions& options,
                            const std::string& output_directory);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_TOKENIZER_TRAINER_H_
