// The on-disk token dataset format ("plateau-tokens", version 1).
//
// A dataset directory holds:
//   index.json            what follows, written last
//   tokenizer.model       the SentencePiece model that produced the ids;
//                         absent from ids prepared elsewhere without one
//   train-NNNNN.bin       the train split, in order
//   validation-NNNNN.bin  the validation split, in order
// A shard file is a 24-byte header followed by the token ids:
//   bytes 0..7    magic "PLTOKENS"
//   bytes 8..11   uint32 format version (1)
//   bytes 12..15  uint32 bytes per token: 2 (uint16) if vocab_size <= 65536,
//                 else 4 (uint32)
//   bytes 16..23  uint64 token count
//   bytes 24..    token ids
// All integers are little-endian. The file size must be exactly
// 24 + count * bytes_per_token, so a truncated shard is detected. Each
// document is its ids followed by the EOS id; a document may continue into
// the next shard of its split. index.json lists every shard with its token
// count and the SHA-256 of the whole file.
#ifndef PLATEAU_ENGINE_DATA_SHARD_FORMAT_H_
#define PLATEAU_ENGINE_DATA_SHARD_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace plateau::engine {

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are read in place: a little-endian host is required"
#endif

inline constexpr char kShardMagic[] = "PLTOKENS";  // 8 bytes, no NUL on disk
inline constexpr size_t kShardMagicBytes = 8;
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 24;

inline constexpr char kIndexFileName[] = "index.json";
inline constexpr char kIndexFormatName[] = "plateau-tokens";
inline constexpr int64_t kIndexVersion = 1;
inline constexpr char kTrainSplit[] = "train";
inline constexpr char kValidationSplit[] = "validation";

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t bytes_per_token = 0;
  uint64_t tokens = 0;
};

// Writes kShardHeaderBytes bytes to `out`.
void EncodeShardHeader(const ShardHeader& header, uint8_t* out);
// Checks size and magic; `path` is for messages. Does not check the version.
absl::StatusOr<ShardHeader> DecodeShardHeader(const uint8_t* data,
                                              size_t size_bytes,
                                              const std::string& path);

// 2 if vocab_size <= 65536, else 4.
uint32_t BytesPerToken(int64_t vocab_size);
// "uint16" or "uint32".
std::string TokenDtypeName(uint32_t bytes_per_token);
// "train-00003.bin".
std::string ShardFileName(const std::string& split, int64_t shard_index);

struct ShardEntry {
  std::string file;   // name inside the dataset directory
  std::string split;  // kTrainSplit or kValidationSplit
  int64_t tokens = 0;
  std::string sha256;  // of the whole file, 64 lowercase hex digits
};

// The content of index.json.
struct DatasetIndex {
  int64_t vocab_size = 0;
  std::string dtype;  // TokenDtypeName(BytesPerToken(vocab_size))
  int64_t eos_id = -1;
  std::string tokenizer_file;  // empty: none
  int64_t train_documents = 0;
  int64_t validation_documents = 0;
  int64_t train_tokens = 0;
  int64_t validation_tokens = 0;
  // Entropy of the train split's token frequencies, in nats per token: the
  // loss of a model that learned only how often each token occurs.
  double unigram_entropy_nats = 0.0;
  std::vector<ShardEntry> shards;  // train shards first, each split in order
};

std::string DatasetIndexToJson(const DatasetIndex& index);
// Checks the format name, version, field types, dtype against vocab_size,
// shard names (plain file names) and that the shard token counts add up to
// the split totals. `path` is for messages.
absl::StatusOr<DatasetIndex> ParseDatasetIndex(const std::string& json_text,
                                               const std::string& path);

// ParseDatasetIndex of <directory>/index.json; NOT_FOUND, saying the
// directory is not a token dataset, when there is none.
absl::StatusOr<DatasetIndex> ReadDatasetIndex(const std::string& directory);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_SHARD_FORMAT_H_
