// Read access to a token dataset written by PrepareDataset (format in
// shard_format.h). Open() checks the index and every shard's header and size;
// the shards are then mmapped read-only and the object is immutable: every
// method is const and thread-safe. Reading needs no tokenizer (and must not
// load one: see BUILD).
//
// Training batches have no hidden state: a batch is a pure function of
// (seed, step), so a resumed run sees exactly the batches it would have.
#ifndef PLATEAU_ENGINE_DATA_TOKEN_DATASET_H_
#define PLATEAU_ENGINE_DATA_TOKEN_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace plateau {
class MappedFile;  // common/file_util.h
}  // namespace plateau

namespace plateau::engine {

struct TokenDatasetOptions {
  // Read every shard in full: compare its SHA-256 with the index and check
  // that every id is below vocab_size. Costs a pass over all the data.
  bool verify_checksums = false;
  // If positive, the dataset's vocab_size must equal it (the model's).
  int64_t expected_vocab_size = 0;
};

class TokenDataset {
 public:
  // Errors name the file and what is wrong: no or bad index.json, vocab
  // mismatch (index, tokenizer.model, expected_vocab_size), missing,
  // truncated or altered shard, ids out of range (with verify_checksums).
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(
      const std::string& directory, const TokenDatasetOptions& options = {});

  ~TokenDataset();
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  int64_t vocab_size() const { return vocab_size_; }
  int32_t eos_id() const { return eos_id_; }
  int64_t train_tokens() const { return train_tokens_; }
  int64_t validation_tokens() const { return validation_tokens_; }
  double unigram_entropy_nats() const { return unigram_entropy_nats_; }
  // Empty for ids prepared elsewhere without a tokenizer.
  const std::string& tokenizer_path() const { return tokenizer_path_; }

  // Number of positions a window of seq_len + 1 train tokens can start at.
  // Windows do not cross shard boundaries.
  int64_t TrainWindowStarts(int64_t seq_len) const;

  // Fills out[sequences][seq_len + 1] (row-major) with windows of seq_len + 1
  // consecutive train tokens. Row r starts at a position drawn uniformly from
  // the TrainWindowStarts(seq_len) valid ones by
  //   h = SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ r),
  //   position = (h * starts) >> 64   (128-bit product)
  // counted across the train shards in order (SplitMix64: common/random.h).
  // REQUIRES: seq_len >= 1, sequences >= 0, TrainWindowStarts(seq_len) > 0.
  void TrainBatch(uint64_t seed, int64_t step, int64_t sequences,
                  int64_t seq_len, int32_t* out) const;

  // Validation window i is validation tokens [i * seq_len,
  // i * seq_len + seq_len + 1) of the concatenated validation split; a final
  // window without seq_len + 1 tokens is not counted.
  int64_t ValidationWindows(int64_t seq_len) const;
  // Fills out[seq_len + 1]. REQUIRES: 0 <= index < ValidationWindows(seq_len).
  void ValidationWindow(int64_t index, int64_t seq_len, int32_t* out) const;

 private:
  struct Shard {
    std::string path;
    std::unique_ptr<MappedFile> file;
    const uint8_t* tokens_data;  // just past the header
    int64_t tokens;
  };

  TokenDataset();
  // Copies tokens [first, first + count) of `shard` to out as int32.
  void CopyTokens(const Shard& shard, int64_t first, int64_t count,
                  int32_t* out) const;

  int64_t vocab_size_ = 0;
  int32_t eos_id_ = -1;
  uint32_t bytes_per_token_ = 0;
  int64_t train_tokens_ = 0;
  int64_t validation_tokens_ = 0;
  double unigram_entropy_nats_ = 0.0;
  std::string tokenizer_path_;
  std::vector<Shard> train_shards_;
  std::vector<Shard> validation_shards_;
  // validation_starts_[i]: index of validation_shards_[i]'s first token in
  // the concatenated split.
  std::vector<int64_t> validation_starts_;
};

// Reads a raw token file: little-endian uint32 ids, no header (for
// `eval --tokens FILE`). Error if the size is not a multiple of 4 or an id
// is >= vocab_size (naming its byte offset).
absl::StatusOr<std::vector<int32_t>> ReadRawTokenFile(const std::string& path,
                                                      int64_t vocab_size);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_TOKEN_DATASET_H_
