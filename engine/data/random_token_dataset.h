// For tests: a prepared dataset (shards.h) of uniformly random token ids,
// and the uint16 shard files it is made of, without a tokenizer
// (SentencePiece may not be loaded beside protobuf). What a model learns
// from it does not matter; the shapes it trains with do. Failures abort
// the test binary.
#ifndef PLATEAU_ENGINE_DATA_RANDOM_TOKEN_DATASET_H_
#define PLATEAU_ENGINE_DATA_RANDOM_TOKEN_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/shard_format.h"

namespace plateau::engine::testing {

// Writes <directory>/<ShardFileName(split, shard_index)>, a uint16 shard
// holding `ids`; returns its index entry.
ShardEntry WriteUint16Shard(const std::string& directory,
                            const std::string& split, int64_t shard_index,
                            const std::vector<uint16_t>& ids);

// Writes the dataset into `directory`: ids below `vocab` (at most 65,536),
// deterministic in `seed`.
void WriteRandomTokenDataset(const std::string& directory, int64_t vocab,
                             int64_t train_tokens, int64_t validation_tokens,
                             uint32_t seed);

}  // namespace plateau::engine::testing

#endif  // PLATEAU_ENGINE_DATA_RANDOM_TOKEN_DATASET_H_
