#include "engine/data/token_dataset.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/random.h"
#include "engine/data/shard_format.h"

namespace plateau::engine {
namespace {

// Caller bugs (broken REQUIRES) end the process with a message: writing
// past `out` or reading past a mapping would be worse.
void CheckOrDie(bool condition, const char* message) {
  if (condition) return;
  std::fprintf(stderr, "TokenDataset: %s\n", message);
  std::abort();
}

template <typename TokenType>
int64_t FirstTokenAtOrAbove(const uint8_t* data, int64_t tokens,
                            int64_t limit) {
  const auto* ids = reinterpret_cast<const TokenType*>(data);
  for (int64_t i = 0; i < tokens; ++i) {
    if (static_cast<int64_t>(ids[i]) >= limit) return i;
  }
  return -1;
}

}  // namespace

TokenDataset::TokenDataset() = default;
TokenDataset::~TokenDataset() = default;

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(
    const std::string& directory, const TokenDatasetOptions& options) {
  absl::StatusOr<DatasetIndex> index = ReadDatasetIndex(directory);
  if (!index.ok()) return index.status();
  const std::string index_path = absl::StrCat(directory, "/", kIndexFileName);

  if (options.expected_vocab_size > 0 &&
      options.expected_vocab_size != index->vocab_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("vocab mismatch: dataset ", directory, " has vocab_size ",
                     index->vocab_size, " but ", options.expected_vocab_size,
                     " is expected (the model's vocab_size)"));
  }
  std::unique_ptr<TokenDataset> dataset(new TokenDataset());
  if (!index->tokenizer_file.empty()) {
    dataset->tokenizer_path_ =
        absl::StrCat(directory, "/", index->tokenizer_file);
  }

  dataset->vocab_size_ = index->vocab_size;
  dataset->eos_id_ = static_cast<int32_t>(index->eos_id);
  dataset->bytes_per_token_ = BytesPerToken(index->vocab_size);
  dataset->train_tokens_ = index->train_tokens;
  dataset->validation_tokens_ = index->validation_tokens;
  dataset->unigram_entropy_nats_ = index->unigram_entropy_nats;
  if (index->train_tokens == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset ", directory, " has no train tokens"));
  }

  for (const ShardEntry& entry : index->shards) {
    Shard shard;
    shard.path = absl::StrCat(directory, "/", entry.file);
    absl::StatusOr<std::unique_ptr<MappedFile>> file =
        MappedFile::Open(shard.path);
    if (absl::IsNotFound(file.status())) {
      return absl::NotFoundError(absl::StrCat("missing shard ", shard.path,
                                              " (listed in ", index_path, ")"));
    }
    if (!file.ok()) return file.status();
    shard.file = std::move(*file);
    const size_t size_bytes = shard.file->size_bytes();
    absl::StatusOr<ShardHeader> header =
        DecodeShardHeader(shard.file->data(), size_bytes, shard.path);
    if (!header.ok()) return header.status();
    if (header->version != kShardVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "token shard ", shard.path, " has format version ", header->version,
          "; this build reads version ", kShardVersion));
    }
    if (header->bytes_per_token != dataset->bytes_per_token_) {
      return absl::DataLossError(absl::StrCat(
          "token shard ", shard.path, " stores ", header->bytes_per_token,
          "-byte tokens, but vocab_size ", index->vocab_size, " in ",
          index_path, " needs ", dataset->bytes_per_token_));
    }
    if (header->tokens != static_cast<uint64_t>(entry.tokens)) {
      return absl::DataLossError(absl::StrCat(
          "token shard ", shard.path, " holds ", header->tokens,
          " tokens by its header, but ", index_path, " says ", entry.tokens));
    }
    const uint64_t expected_bytes =
        kShardHeaderBytes + header->tokens * header->bytes_per_token;
    if (size_bytes != expected_bytes) {
      return absl::DataLossError(absl::StrCat(
          "token shard ", shard.path,
          size_bytes < expected_bytes ? " is truncated: " : " is too long: ",
          size_bytes, " bytes, expected ", expected_bytes, " for ",
          header->tokens, " tokens"));
    }
    shard.tokens_data = shard.file->data() + kShardHeaderBytes;
    shard.tokens = entry.tokens;
    if (options.verify_checksums) {
      if (Sha256Hex(shard.file->data(), size_bytes) != entry.sha256) {
        return absl::DataLossError(absl::StrCat(
            "token shard ", shard.path, " does not match its SHA-256 in ",
            index_path, ": the file was altered or corrupted"));
      }
      const int64_t bad_token =
          dataset->bytes_per_token_ == 2
              ? FirstTokenAtOrAbove<uint16_t>(shard.tokens_data, shard.tokens,
                                              dataset->vocab_size_)
              : FirstTokenAtOrAbove<uint32_t>(shard.tokens_data, shard.tokens,
                                              dataset->vocab_size_);
      if (bad_token >= 0) {
        return absl::DataLossError(absl::StrCat(
            "token shard ", shard.path, ": token ", bad_token, " (byte offset ",
            kShardHeaderBytes + bad_token * dataset->bytes_per_token_,
            ") is out of range for vocab_size ", dataset->vocab_size_));
      }
    }
    if (entry.split == kTrainSplit) {
      dataset->train_shards_.push_back(std::move(shard));
    } else {
      dataset->validation_starts_.push_back(
          dataset->validation_starts_.empty()
              ? 0
              : dataset->validation_starts_.back() +
                    dataset->validation_shards_.back().tokens);
      dataset->validation_shards_.push_back(std::move(shard));
    }
  }
  return dataset;
}

void TokenDataset::CopyTokens(const Shard& shard, int64_t first, int64_t count,
                              int32_t* out) const {
  if (bytes_per_token_ == 2) {
    const auto* ids = reinterpret_cast<const uint16_t*>(shard.tokens_data);
    std::copy(ids + first, ids + first + count, out);
  } else {
    const auto* ids = reinterpret_cast<const uint32_t*>(shard.tokens_data);
    std::transform(ids + first, ids + first + count, out,
                   [](uint32_t id) { return static_cast<int32_t>(id); });
  }
}

int64_t TokenDataset::TrainWindowStarts(int64_t seq_len) const {
  int64_t starts = 0;
  for (const Shard& shard : train_shards_) {
    starts += std::max<int64_t>(0, shard.tokens - seq_len);
  }
  return starts;
}

void TokenDataset::TrainBatch(uint64_t seed, int64_t step, int64_t sequences,
                              int64_t seq_len, int32_t* out) const {
  CheckOrDie(seq_len >= 1 && sequences >= 0,
             "TrainBatch needs seq_len >= 1 and sequences >= 0");
  // shard_end_starts[i]: valid starts in train shards 0..i together.
  std::vector<int64_t> shard_end_starts(train_shards_.size());
  int64_t total_starts = 0;
  for (size_t i = 0; i < train_shards_.size(); ++i) {
    total_starts += std::max<int64_t>(0, train_shards_[i].tokens - seq_len);
    shard_end_starts[i] = total_starts;
  }
  CheckOrDie(total_starts > 0,
             "TrainBatch: no train shard holds seq_len + 1 tokens");
  const uint64_t step_key =
      SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(step));
  const int64_t row_tokens = seq_len + 1;
  for (int64_t row = 0; row < sequences; ++row) {
    const uint64_t h = SplitMix64(step_key ^ static_cast<uint64_t>(row));
    // Maps h to [0, total_starts); the bias is below total_starts / 2^64.
    const int64_t position =
        static_cast<int64_t>((static_cast<unsigned __int128>(h) *
                              static_cast<uint64_t>(total_starts)) >>
                             64);
    const size_t shard_index =
        std::upper_bound(shard_end_starts.begin(), shard_end_starts.end(),
                         position) -
        shard_end_starts.begin();
    const int64_t shard_first_start =
        shard_index == 0 ? 0 : shard_end_starts[shard_index - 1];
    CopyTokens(train_shards_[shard_index], position - shard_first_start,
               row_tokens, out + row * row_tokens);
  }
}

int64_t TokenDataset::ValidationWindows(int64_t seq_len) const {
  if (seq_len < 1 || validation_tokens_ < seq_len + 1) return 0;
  return (validation_tokens_ - 1) / seq_len;
}

void TokenDataset::ValidationWindow(int64_t index, int64_t seq_len,
                                    int32_t* out) const {
  CheckOrDie(index >= 0 && index < ValidationWindows(seq_len),
             "ValidationWindow: index out of range");
  int64_t position = index * seq_len;
  int64_t left_tokens = seq_len + 1;
  size_t shard_index = std::upper_bound(validation_starts_.begin(),
                                        validation_starts_.end(), position) -
                       validation_starts_.begin() - 1;
  while (left_tokens > 0) {
    const Shard& shard = validation_shards_[shard_index];
    const int64_t first = position - validation_starts_[shard_index];
    const int64_t count = std::min(left_tokens, shard.tokens - first);
    CopyTokens(shard, first, count, out);
    out += count;
    position += count;
    left_tokens -= count;
    ++shard_index;
  }
}

absl::StatusOr<std::vector<int32_t>> ReadRawTokenFile(const std::string& path,
                                                      int64_t vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading ", path, ": vocab_size must be positive"));
  }
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, " has ", bytes->size(),
        " bytes, not a multiple of 4: expected raw little-endian uint32 ids"));
  }
  if (bytes->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, " holds no tokens"));
  }
  std::vector<int32_t> ids(bytes->size() / 4);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes->data());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = uint32_t{data[4 * i]} | uint32_t{data[4 * i + 1]} << 8 |
                        uint32_t{data[4 * i + 2]} << 16 |
                        uint32_t{data[4 * i + 3]} << 24;
    if (id >= static_cast<uint64_t>(vocab_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file ", path, ": id ", id, " at byte offset ",
                       4 * i, " is out of range for vocab_size ", vocab_size));
    }
    ids[i] = static_cast<int32_t>(id);
  }
  return ids;
}

}  // namespace plateau::engine
