// A SentencePiece tokenizer in the Hugging Face layout, as transformers'
// LlamaTokenizer reads one (the form of Mistral's and Mixtral's own
// tokenizers), so that those tools encode text to the ids a model was
// trained on. Into an existing directory it writes
//   tokenizer.model          the model file, byte for byte
//   tokenizer_config.json    LlamaTokenizer; legacy (SentencePiece's own
//                            encoding, as Plateau's: the newer mode handles
//                            the prefix space itself); no BOS or EOS added,
//                            since a Plateau document is its text's pieces
//                            then EOS, and no training window begins with a
//                            BOS
//   special_tokens_map.json  the unk, bos and eos pieces the model has
// plateau-data writes them (`hf-tokenizer`) for plateau-worker export
// (engine/train/hf_export.h), which adds the ids to config.json: it is the
// only binary that links SentencePiece.
#ifndef PLATEAU_ENGINE_DATA_HF_TOKENIZER_H_
#define PLATEAU_ENGINE_DATA_HF_TOKENIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/data/tokenizer.h"

namespace plateau::engine {

// `serialized_model` is the file `tokenizer` was loaded from;
// `model_max_length` the model's seq_len.
absl::Status WriteHfTokenizer(const Tokenizer& tokenizer,
                              const std::string& serialized_model,
                              int64_t model_max_length,
                              const std::string& directory);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_HF_TOKENIZER_H_
