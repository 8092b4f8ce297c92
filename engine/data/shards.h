// Preparing a token dataset (format in shard_format.h) from a text corpus:
// read the documents (corpus.h), hold out whole documents for validation,
// train the tokenizer on the train documents (tokenizer_trainer.h) or take
// an existing SentencePiece model, encode every document followed by EOS,
// and write the shards and index.json. The corpus is streamed, in passes
// (count the documents; train the tokenizer; encode), each reading a batch
// of documents at a time and encoding it on every thread, so memory holds a
// batch, a shard's buffer and the tokenizer's training lines (at most
// TokenizerTrainingOptions::max_training_sentences), whatever the corpus's
// size.
//
// Or from token ids another pipeline wrote (token_array.h): the files are
// read in order as one stream of documents, each ended by the separator id
// (a last one without it gets it), streamed through memory a shard at a
// time whatever their size. Whole documents are held out for validation as
// from a corpus, or the validation ids come from files of their own.
//
// The output appears atomically: everything is written and fsynced in a
// temporary directory beside the output (".<name>.tmp-XXXXXX"), which is
// then renamed into place. On error the temporary directory is removed and
// the output is left as it was. The same corpus and options give the same
// files, byte for byte.
#ifndef PLATEAU_ENGINE_DATA_SHARDS_H_
#define PLATEAU_ENGINE_DATA_SHARDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace plateau::engine {

struct PrepareDatasetOptions {
  // A corpus (corpus.h), or token arrays: exactly one of the two.
  std::string input_directory;
  std::vector<std::string> token_files;
  // With token_files: validation ids from these files instead of held-out
  // documents (nanoGPT's val.bin); may be empty.
  std::vector<std::string> validation_token_files;
  // The token arrays' id width for raw files: 2 or 4 bytes; 0: each file's
  // .npy header says.
  uint32_t token_bytes = 0;
  // The token arrays' document separator (GPT-2's end of text is 50256);
  // -1: the given tokenizer's end-of-document id.
  int64_t separator_id = -1;
  std::string output_directory;  // created; its parent is created if needed
  // The tokenizer to train (TokenizerTrainingOptions::vocab_size), unless
  // tokenizer_model is given: then 0 or that model's size. With token
  // arrays, their vocabulary: every id is below it.
  int64_t vocab_size = 0;
  // An existing SentencePiece model file to encode with instead of training
  // one (a Llama's, say); copied into the dataset. It must have an
  // end-of-document piece: every document ends with it. With token arrays
  // it is optional, copied when given (the ids are not checked against it).
  std::string tokenizer_model;
  // The share of documents held out for validation: every Nth document, N =
  // documents / round(fraction * documents), starting at seed mod N; at
  // least one document, and at least one is left for training. In (0, 1).
  double validation_fraction = 0.01;
  int64_t shard_tokens = int64_t{16} << 20;  // tokens per shard file
  uint64_t seed = 0;
  // Replace an existing non-empty output directory; without it that is an
  // error. An empty existing directory is always replaced.
  bool overwrite = false;
  int32_t encode_threads = 0;  // 0: one per hardware thread
};

absl::Status PrepareDataset(const PrepareDatasetOptions& options);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_SHARDS_H_
