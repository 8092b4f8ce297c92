// Preparing a token dataset (format in shard_format.h) from a text corpus:
// read the documents (corpus.h), hold out whole documents for validation,
// train the tokenizer on the train documents (tokenizer_trainer.h) or take
// an existing SentencePiece model, encode every document followed by EOS,
// and write the shards and index.json.
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

#include "absl/status/status.h"

namespace plateau::engine {

struct PrepareDatasetOptions {
  std::string input_directory;   // a corpus, see corpus.h
  std::string output_directory;  // created; its parent is created if needed
  // The tokenizer to train (TokenizerTrainingOptions::vocab_size), unless
  // tokenizer_model is given: then 0 or that model's size.
  int64_t vocab_size = 0;
  // An existing SentencePiece model file to encode with instead of training
  // one (a Llama's, say); copied into the dataset. It must have an
  // end-of-document piece: every document ends with it.
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
