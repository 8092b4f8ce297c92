// For tests that train: a prepared dataset (shards.h) of uniformly random
// token ids, without a tokenizer (SentencePiece may not be loaded beside
// protobuf). What a model learns from it does not matter; the shapes it
// trains with do. Failures abort the test binary.
#ifndef PLATEAU_ENGINE_DATA_RANDOM_TOKEN_DATASET_H_
#define PLATEAU_ENGINE_DATA_RANDOM_TOKEN_DATASET_H_

#include <cstdint>
#include <string>

namespace plateau::engine::testing {

// Writes the dataset into `directory`: ids below `vocab` (at most 65,536),
// deterministic in `seed`.
void WriteRandomTokenDataset(const std::string& directory, int64_t vocab,
                             int64_t train_tokens, int64_t validation_tokens,
                             uint32_t seed);

}  // namespace plateau::engine::testing

#endif  // PLATEAU_ENGINE_DATA_RANDOM_TOKEN_DATASET_H_
