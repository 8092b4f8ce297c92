#include "engine/data/shards.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "engine/data/corpus.h"
#include "engine/data/shard_format.h"
#include "engine/data/tokenizer.h"
#include "engine/data/tokenizer_trainer.h"

namespace plateau::engine {
namespace {

namespace fs = std::filesystem;

// Documents encoded in parallel at a time; bounds the ids held in memory.
constexpr size_t kEncodeBatchDocuments = 1024;
constexpr int32_t kMaxEncodeThreads = 64;
// A shard's buffer grows past this only as tokens arrive.
constexpr int64_t kMaxReservedShardTokens = int64_t{16} << 20;

absl::Status ValidateOptions(const PrepareDatasetOptions& options) {
  if (options.input_directory.empty() || options.output_directory.empty()) {
    return absl::InvalidArgumentError(
        "prepare dataset: input and output directories must be given");
  }
  if (!(options.validation_fraction > 0.0 &&
        options.validation_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: validation_fraction must be in (0, 1), "
                     "got ",
                     options.validation_fraction));
  }
  const bool trains_tokenizer = options.tokenizer_model.empty();
  if ((trains_tokenizer && options.vocab_size <= 0) || options.vocab_size < 0 ||
      options.vocab_size > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: vocab_size must be in [1, 2^31)",
                     trains_tokenizer ? "" : " or 0 (the tokenizer's)",
                     ", got ", options.vocab_size));
  }
  if (options.shard_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: shard_tokens must be positive, got ",
                     options.shard_tokens));
  }
  if (options.encode_threads < 0) {
    return absl::InvalidArgumentError(
        "prepare dataset: encode_threads must be >= 0");
  }
  return absl::OkStatus();
}

// Refuses an output that is, or contains, the input: replacing it would
// delete the corpus.
absl::Status CheckOutputIsNotAboveInput(const std::string& input,
                                        const std::string& output) {
  std::error_code error;
  const fs::path input_path = fs::weakly_canonical(input, error);
  if (error) return absl::OkStatus();  // reading the corpus will report it
  const fs::path output_path = fs::weakly_canonical(output, error);
  if (error) return absl::OkStatus();
  const std::string relative =
      input_path.lexically_relative(output_path).generic_string();
  if (relative == "." ||
      (!relative.empty() && !absl::StartsWith(relative, ".."))) {
    return absl::InvalidArgumentError(
        absl::StrCat("output directory ", output, " is or contains the ",
                     "input corpus ", input, "; write the dataset elsewhere"));
  }
  return absl::OkStatus();
}

// Held-out documents: every Nth document starting at seed mod N (the corpus
// is sorted by name, so this spreads them over the corpus's sections).
std::vector<bool> ChooseValidationDocuments(int64_t documents, double fraction,
                                            uint64_t seed) {
  const int64_t held_out = std::clamp<int64_t>(
      std::llround(fraction * static_cast<double>(documents)), 1,
      documents - 1);
  const int64_t stride = documents / held_out;
  const int64_t first =
      static_cast<int64_t>(seed % static_cast<uint64_t>(stride));
  std::vector<bool> is_validation(documents, false);
  for (int64_t k = 0; k < held_out; ++k) {
    is_validation[first + k * stride] = true;
  }
  return is_validation;
}

// Accumulates one split's tokens and writes a shard file each time
// shard_tokens have been appended. Optionally counts token frequencies.
class ShardWriter {
 public:
  ShardWriter(std::string directory, std::string split, int64_t shard_tokens,
              uint32_t bytes_per_token, std::vector<ShardEntry>* shards,
              std::vector<int64_t>* token_counts)
      : directory_(std::move(directory)),
        split_(std::move(split)),
        shard_tokens_(shard_tokens),
        bytes_per_token_(bytes_per_token),
        shards_(shards),
        token_counts_(token_counts) {
    ResetBuffer();
  }

  // REQUIRES: every id is in [0, vocab_size).
  absl::Status Append(const std::vector<int32_t>& ids) {
    for (const int32_t id : ids) {
      const uint32_t value = static_cast<uint32_t>(id);
      const size_t offset = buffer_.size();
      buffer_.resize(offset + bytes_per_token_);
      for (uint32_t b = 0; b < bytes_per_token_; ++b) {
        buffer_[offset + b] = static_cast<uint8_t>(value >> (8 * b));
      }
      if (token_counts_ != nullptr) ++(*token_counts_)[id];
      ++total_tokens_;
      if (++buffered_tokens_ == shard_tokens_) {
        if (absl::Status status = Flush(); !status.ok()) return status;
      }
    }
    return absl::OkStatus();
  }

  // Writes the last, partial shard.
  absl::Status Finish() {
    return buffered_tokens_ > 0 ? Flush() : absl::OkStatus();
  }

  int64_t total_tokens() const { return total_tokens_; }

 private:
  void ResetBuffer() {
    buffer_.assign(kShardHeaderBytes, 0);
    const int64_t reserved_tokens =
        std::min<int64_t>(shard_tokens_, kMaxReservedShardTokens);
    buffer_.reserve(kShardHeaderBytes +
                    static_cast<size_t>(reserved_tokens) * bytes_per_token_);
    buffered_tokens_ = 0;
  }

  absl::Status Flush() {
    ShardHeader header;
    header.bytes_per_token = bytes_per_token_;
    header.tokens = static_cast<uint64_t>(buffered_tokens_);
    EncodeShardHeader(header, buffer_.data());
    ShardEntry shard;
    shard.file = ShardFileName(split_, static_cast<int64_t>(shard_count_++));
    shard.split = split_;
    shard.tokens = buffered_tokens_;
    shard.sha256 = Sha256Hex(buffer_.data(), buffer_.size());
    if (absl::Status status =
            WriteFileSynced(absl::StrCat(directory_, "/", shard.file),
                            buffer_.data(), buffer_.size());
        !status.ok()) {
      return status;
    }
    shards_->push_back(std::move(shard));
    ResetBuffer();
    return absl::OkStatus();
  }

  const std::string directory_;
  const std::string split_;
  const int64_t shard_tokens_;
  const uint32_t bytes_per_token_;
  std::vector<ShardEntry>* const shards_;
  std::vector<int64_t>* const token_counts_;  // may be null
  std::vector<uint8_t> buffer_;               // header, then the ids
  int64_t buffered_tokens_ = 0;
  int64_t total_tokens_ = 0;
  size_t shard_count_ = 0;
};

// Encodes each document followed by the tokenizer's EOS id and appends them
// in order to `writer`. Batches are encoded on `threads` threads; the output
// does not depend on the thread count.
absl::Status EncodeDocuments(const Tokenizer& tokenizer,
                             const std::vector<std::string>& documents,
                             int32_t threads, ShardWriter* writer) {
  std::vector<std::vector<int32_t>> batch_ids;
  std::vector<absl::Status> thread_statuses(threads);
  for (size_t batch_start = 0; batch_start < documents.size();
       batch_start += kEncodeBatchDocuments) {
    const size_t batch_size =
        std::min(kEncodeBatchDocuments, documents.size() - batch_start);
    batch_ids.assign(batch_size, {});
    auto encode_every_nth = [&](int32_t thread_index) {
      for (size_t i = thread_index; i < batch_size; i += threads) {
        absl::Status status =
            tokenizer.Encode(documents[batch_start + i], &batch_ids[i]);
        if (!status.ok()) {
          thread_statuses[thread_index] = std::move(status);
          return;
        }
      }
    };
    std::vector<std::thread> workers;
    for (int32_t t = 1; t < threads; ++t) {
      workers.emplace_back(encode_every_nth, t);
    }
    encode_every_nth(0);
    for (std::thread& worker : workers) worker.join();
    for (const absl::Status& status : thread_statuses) {
      if (!status.ok()) return status;
    }
    for (std::vector<int32_t>& ids : batch_ids) {
      ids.push_back(tokenizer.eos_id());
      if (absl::Status status = writer->Append(ids); !status.ok()) {
        return status;
      }
    }
  }
  return writer->Finish();
}

double UnigramEntropyNats(const std::vector<int64_t>& token_counts) {
  int64_t total = 0;
  for (const int64_t count : token_counts) total += count;
  if (total == 0) return 0.0;
  double entropy_nats = 0.0;
  for (const int64_t count : token_counts) {
    if (count == 0) continue;
    const double p = static_cast<double>(count) / static_cast<double>(total);
    entropy_nats -= p * std::log(p);
  }
  return entropy_nats;
}

// The given tokenizer (options.tokenizer_model), checked to be one the
// dataset can use: a SentencePiece model with an end-of-document piece, of
// options.vocab_size ids if that is given.
absl::StatusOr<std::string> ReadGivenTokenizer(
    const PrepareDatasetOptions& options) {
  const std::string& path = options.tokenizer_model;
  absl::StatusOr<std::string> serialized_model = ReadFileToString(path);
  if (!serialized_model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: cannot read the tokenizer ", path, ": ",
                     serialized_model.status().message()));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromSerializedModel(*serialized_model, path);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prepare dataset: the tokenizer ", path,
        " is not a SentencePiece model: ", tokenizer.status().message()));
  }
  if ((*tokenizer)->eos_id() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prepare dataset: the tokenizer ", path,
        " has no end-of-document piece (</s>); every document ends with it"));
  }
  if (options.vocab_size != 0 &&
      (*tokenizer)->vocab_size() != options.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prepare dataset: the tokenizer ", path, " has ",
        (*tokenizer)->vocab_size(), " ids, not the ", options.vocab_size,
        " asked for (leave the vocabulary size out to take the tokenizer's)"));
  }
  return serialized_model;
}

// Writes tokenizer, shards and index into `directory`: the given tokenizer
// (`given_model`, serialized) or, when that is empty, one trained on the
// train documents alone.
absl::Status WriteDataset(const PrepareDatasetOptions& options,
                          const std::string& given_model,
                          const std::vector<std::string>& train_documents,
                          const std::vector<std::string>& validation_documents,
                          const std::string& directory) {
  absl::StatusOr<std::string> serialized_model = given_model;
  if (given_model.empty()) {
    TokenizerTrainingOptions tokenizer_options;
    tokenizer_options.vocab_size = options.vocab_size;
    tokenizer_options.seed = static_cast<uint32_t>(options.seed);
    serialized_model = TrainTokenizerModel(train_documents, tokenizer_options);
    if (!serialized_model.ok()) return serialized_model.status();
  }
  const std::string tokenizer_path =
      absl::StrCat(directory, "/", kTokenizerFileName);
  if (absl::Status status = WriteFileSynced(
          tokenizer_path, serialized_model->data(), serialized_model->size());
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromSerializedModel(*serialized_model, tokenizer_path);
  if (!tokenizer.ok()) return tokenizer.status();
  const int64_t vocab_size = (*tokenizer)->vocab_size();
  if ((given_model.empty() && vocab_size != options.vocab_size) ||
      (*tokenizer)->eos_id() < 0) {
    return absl::InternalError(absl::StrCat(
        "trained tokenizer has ", vocab_size, " ids (asked for ",
        options.vocab_size, ") and EOS id ", (*tokenizer)->eos_id()));
  }

  int32_t threads = options.encode_threads;
  if (threads == 0) {
    threads = static_cast<int32_t>(std::thread::hardware_concurrency());
  }
  threads = std::clamp(threads, 1, kMaxEncodeThreads);
  const uint32_t bytes_per_token = BytesPerToken(vocab_size);
  DatasetIndex index;
  std::vector<int64_t> token_counts(vocab_size, 0);
  ShardWriter train_writer(directory, kTrainSplit, options.shard_tokens,
                           bytes_per_token, &index.shards, &token_counts);
  absl::Status status =
      EncodeDocuments(**tokenizer, train_documents, threads, &train_writer);
  if (!status.ok()) return status;
  ShardWriter validation_writer(directory, kValidationSplit,
                                options.shard_tokens, bytes_per_token,
                                &index.shards, nullptr);
  status = EncodeDocuments(**tokenizer, validation_documents, threads,
                           &validation_writer);
  if (!status.ok()) return status;

  index.vocab_size = vocab_size;
  index.dtype = TokenDtypeName(bytes_per_token);
  index.eos_id = (*tokenizer)->eos_id();
  index.tokenizer_file = kTokenizerFileName;
  index.train_documents = static_cast<int64_t>(train_documents.size());
  index.validation_documents =
      static_cast<int64_t>(validation_documents.size());
  index.train_tokens = train_writer.total_tokens();
  index.validation_tokens = validation_writer.total_tokens();
  index.unigram_entropy_nats = UnigramEntropyNats(token_counts);
  const std::string json = DatasetIndexToJson(index);
  status = WriteFileSynced(absl::StrCat(directory, "/", kIndexFileName),
                           json.data(), json.size());
  if (!status.ok()) return status;
  return PosixFileSystem().SyncDirectory(directory);
}

}  // namespace

absl::Status PrepareDataset(const PrepareDatasetOptions& options) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) {
    return status;
  }
  const std::string output = TrimTrailingSlashes(options.output_directory);
  if (absl::Status status =
          CheckReplaceableDirectory(output, options.overwrite);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckOutputIsNotAboveInput(options.input_directory, output);
      !status.ok()) {
    return status;
  }
  // A given tokenizer is checked before the corpus is read.
  std::string given_model;
  if (!options.tokenizer_model.empty()) {
    absl::StatusOr<std::string> read = ReadGivenTokenizer(options);
    if (!read.ok()) return read.status();
    given_model = *std::move(read);
  }
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(options.input_directory);
  if (!documents.ok()) return documents.status();
  if (documents->size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus ", options.input_directory, " has ", documents->size(),
        " document; at least 2 are needed (one is held out for validation)"));
  }
  absl::StatusOr<std::string> staged = MakeSiblingDirectory(output, "tmp");
  if (!staged.ok()) return staged.status();
  bool installed = false;
  absl::Cleanup remove_staged = [&staged, &installed] {
    if (installed) return;
    std::error_code ignored;
    fs::remove_all(*staged, ignored);
  };
  const std::vector<bool> is_validation =
      ChooseValidationDocuments(static_cast<int64_t>(documents->size()),
                                options.validation_fraction, options.seed);
  std::vector<std::string> train_documents, validation_documents;
  for (size_t i = 0; i < documents->size(); ++i) {
    (is_validation[i] ? validation_documents : train_documents)
        .push_back(std::move((*documents)[i]));
  }
  documents->clear();
  if (absl::Status status = WriteDataset(options, given_model, train_documents,
                                         validation_documents, *staged);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          ReplaceDirectory(*staged, output, options.overwrite);
      !status.ok()) {
    return status;
  }
  installed = true;
  return absl::OkStatus();
}

}  // namespace plateau::engine
