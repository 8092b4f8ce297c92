#include "engine/data/shards.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/file_util.h"
#include "engine/data/corpus.h"
#include "engine/data/shard_format.h"
#include "engine/data/token_array.h"
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

absl::Status ValidateTokenArrayOptions(const PrepareDatasetOptions& options) {
  if (options.token_bytes != 0 && options.token_bytes != 2 &&
      options.token_bytes != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: token ids are 2 or 4 bytes wide, not ",
                     options.token_bytes));
  }
  if (options.tokenizer_model.empty() &&
      (options.vocab_size <= 0 || options.separator_id < 0)) {
    return absl::InvalidArgumentError(
        "prepare dataset: token arrays need their vocabulary size and "
        "document separator id, or a tokenizer to take them from");
  }
  if (options.vocab_size < 0 ||
      options.vocab_size > std::numeric_limits<int32_t>::max() ||
      (options.vocab_size > 0 && options.separator_id >= options.vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: vocab_size ", options.vocab_size,
                     " must be in [1, 2^31) and above the separator id ",
                     options.separator_id));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const PrepareDatasetOptions& options) {
  if (options.output_directory.empty()) {
    return absl::InvalidArgumentError(
        "prepare dataset: an output directory must be given");
  }
  if (options.input_directory.empty() == options.token_files.empty()) {
    return absl::InvalidArgumentError(
        "prepare dataset: give a corpus directory or token array files, one "
        "of the two");
  }
  if (!options.validation_token_files.empty() && options.token_files.empty()) {
    return absl::InvalidArgumentError(
        "prepare dataset: validation token files go with token array files");
  }
  if (!(options.validation_fraction > 0.0 &&
        options.validation_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: validation_fraction must be in (0, 1), "
                     "got ",
                     options.validation_fraction));
  }
  if (!options.token_files.empty()) {
    if (absl::Status status = ValidateTokenArrayOptions(options);
        !status.ok()) {
      return status;
    }
  }
  const bool trains_tokenizer =
      options.tokenizer_model.empty() && options.token_files.empty();
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

// The documents held out for validation: every Nth one starting at seed
// mod N (a corpus is sorted by name, so this spreads them over its
// sections), or none.
class HeldOutDocuments {
 public:
  static HeldOutDocuments None() { return HeldOutDocuments(); }
  // REQUIRES: documents >= 2.
  HeldOutDocuments(int64_t documents, double fraction, uint64_t seed)
      : count_(std::clamp<int64_t>(
            std::llround(fraction * static_cast<double>(documents)), 1,
            documents - 1)),
        stride_(documents / count_),
        first_(static_cast<int64_t>(seed % static_cast<uint64_t>(stride_))) {}

  // Whether document `index` (0-based, in input order) is held out.
  bool Contains(int64_t index) const {
    return count_ > 0 && index >= first_ && (index - first_) % stride_ == 0 &&
           (index - first_) / stride_ < count_;
  }
  int64_t count() const { return count_; }

 private:
  HeldOutDocuments() = default;

  int64_t count_ = 0;
  int64_t stride_ = 1;
  int64_t first_ = 0;
};

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
  absl::Status Append(absl::Span<const int32_t> ids) {
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

// Up to kEncodeBatchDocuments next documents of `corpus`; fewer only at
// its end.
absl::Status ReadBatch(CorpusReader& corpus,
                       std::vector<std::string>* documents) {
  documents->resize(kEncodeBatchDocuments);
  for (size_t i = 0; i < kEncodeBatchDocuments; ++i) {
    absl::StatusOr<bool> more = corpus.Next(&(*documents)[i]);
    if (!more.ok()) return more.status();
    if (!*more) {
      documents->resize(i);
      break;
    }
  }
  return absl::OkStatus();
}

// Encodes each document of `corpus` followed by the tokenizer's EOS id and
// appends it, in order, to `train` or, as `held_out` says, to `validation`.
// A batch of documents is read, then encoded on `threads` threads; the
// output does not depend on the thread count. *encoded: the documents.
absl::Status EncodeCorpus(const Tokenizer& tokenizer, CorpusReader& corpus,
                          const HeldOutDocuments& held_out, int32_t threads,
                          ShardWriter* train, ShardWriter* validation,
                          int64_t* encoded) {
  std::vector<std::string> documents;
  std::vector<std::vector<int32_t>> batch_ids;
  std::vector<absl::Status> thread_statuses(threads);
  int64_t index = 0;
  while (true) {
    if (absl::Status status = ReadBatch(corpus, &documents); !status.ok()) {
      return status;
    }
    if (documents.empty()) {
      *encoded = index;
      return absl::OkStatus();
    }
    batch_ids.assign(documents.size(), {});
    auto encode_every_nth = [&](int32_t thread_index) {
      for (size_t i = thread_index; i < documents.size(); i += threads) {
        absl::Status status = tokenizer.Encode(documents[i], &batch_ids[i]);
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
      ShardWriter* writer = held_out.Contains(index++) ? validation : train;
      if (absl::Status status = writer->Append(ids); !status.ok()) {
        return status;
      }
    }
  }
}

// Counts the corpus's documents: a first pass over it, which also checks
// every file.
absl::StatusOr<int64_t> CountDocuments(const std::string& directory) {
  absl::StatusOr<std::unique_ptr<CorpusReader>> corpus =
      CorpusReader::Open(directory);
  if (!corpus.ok()) return corpus.status();
  std::string document;
  int64_t documents = 0;
  while (true) {
    absl::StatusOr<bool> more = (*corpus)->Next(&document);
    if (!more.ok()) return more.status();
    if (!*more) return documents;
    ++documents;
  }
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

// index.json, written last: what lists the dataset's files.
absl::Status WriteIndex(const DatasetIndex& index,
                        const std::string& directory) {
  const std::string json = DatasetIndexToJson(index);
  return WriteFileSynced(absl::StrCat(directory, "/", kIndexFileName),
                         json.data(), json.size());
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
// train documents alone. Each step reads the corpus afresh, a batch of
// documents at a time.
absl::Status WriteDataset(const PrepareDatasetOptions& options,
                          const std::string& given_model, int64_t documents,
                          const HeldOutDocuments& held_out,
                          const std::string& directory) {
  absl::StatusOr<std::string> serialized_model = given_model;
  if (given_model.empty()) {
    absl::StatusOr<std::unique_ptr<CorpusReader>> corpus =
        CorpusReader::Open(options.input_directory);
    if (!corpus.ok()) return corpus.status();
    int64_t index = 0;
    const DocumentSource train_documents =
        [&](std::string* document) -> absl::StatusOr<bool> {
      while (true) {
        absl::StatusOr<bool> more = (*corpus)->Next(document);
        if (!more.ok() || !*more) return more;
        if (!held_out.Contains(index++)) return true;
      }
    };
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
  ShardWriter validation_writer(directory, kValidationSplit,
                                options.shard_tokens, bytes_per_token,
                                &index.shards, nullptr);
  absl::StatusOr<std::unique_ptr<CorpusReader>> corpus =
      CorpusReader::Open(options.input_directory);
  if (!corpus.ok()) return corpus.status();
  int64_t encoded = 0;
  absl::Status status =
      EncodeCorpus(**tokenizer, **corpus, held_out, threads, &train_writer,
                   &validation_writer, &encoded);
  if (status.ok() && encoded != documents) {
    // Which documents are held out was chosen from the first count.
    return absl::FailedPreconditionError(absl::StrCat(
        "corpus ", options.input_directory, " changed while it was read (",
        documents, " documents, then ", encoded, "); prepare it again"));
  }
  if (status.ok()) status = train_writer.Finish();
  if (status.ok()) status = validation_writer.Finish();
  if (!status.ok()) return status;
  // The writers flush in turns: train shards first, as the index lists them.
  std::stable_partition(
      index.shards.begin(), index.shards.end(),
      [](const ShardEntry& shard) { return shard.split == kTrainSplit; });

  index.vocab_size = vocab_size;
  index.dtype = TokenDtypeName(bytes_per_token);
  index.eos_id = (*tokenizer)->eos_id();
  index.tokenizer_file = kTokenizerFileName;
  index.train_documents = documents - held_out.count();
  index.validation_documents = held_out.count();
  index.train_tokens = train_writer.total_tokens();
  index.validation_tokens = validation_writer.total_tokens();
  index.unigram_entropy_nats = UnigramEntropyNats(token_counts);
  return WriteIndex(index, directory);
}

// ---- Token arrays ----

// Ids copied out of the arrays per append: bounds the copy, not the data.
constexpr size_t kTokenChunk = size_t{1} << 16;
// A pass over an array gives back what it has read every this many ids.
constexpr int64_t kReleaseTokens = int64_t{1} << 22;

// One stream of token arrays (token_array.h), read in order: where each
// document starts and ends does not depend on where one file ends.
class TokenStream {
 public:
  static absl::StatusOr<TokenStream> Open(const std::vector<std::string>& paths,
                                          uint32_t token_bytes) {
    TokenStream stream;
    for (const std::string& path : paths) {
      absl::StatusOr<std::unique_ptr<TokenArray>> array =
          TokenArray::Open(path, token_bytes);
      if (!array.ok()) return array.status();
      stream.arrays_.push_back(*std::move(array));
    }
    return stream;
  }

  // Checks every id against the vocabulary and counts the documents: the
  // separators, and a last document without one.
  absl::StatusOr<int64_t> CountDocuments(int64_t vocab_size,
                                         int64_t separator_id) const {
    int64_t documents = 0;
    bool open_document = false;
    for (const std::unique_ptr<TokenArray>& array : arrays_) {
      for (int64_t i = 0; i < array->tokens(); ++i) {
        const uint32_t id = array->At(i);
        if (id >= vocab_size) {
          return absl::InvalidArgumentError(absl::StrCat(
              "token array ", array->path(), ": id ", id, " at index ", i,
              " is outside the vocabulary of ", vocab_size));
        }
        open_document = id != separator_id;
        if (!open_document) ++documents;
        if ((i + 1) % kReleaseTokens == 0) array->ReleaseBefore(i + 1);
      }
      array->ReleaseBefore(array->tokens());
    }
    return documents + (open_document ? 1 : 0);
  }

  // Appends the stream's documents, each ended by the separator, to the
  // train writer or, where held_out says, to the validation one.
  absl::Status Write(int32_t separator_id, const HeldOutDocuments& held_out,
                     ShardWriter* train, ShardWriter* validation) const {
    std::vector<int32_t> chunk;
    chunk.reserve(kTokenChunk);
    int64_t document = 0;
    const auto writer = [&]() {
      return held_out.Contains(document) ? validation : train;
    };
    const auto flush = [&]() {
      absl::Status status = writer()->Append(chunk);
      chunk.clear();
      return status;
    };
    for (const std::unique_ptr<TokenArray>& array : arrays_) {
      for (int64_t i = 0; i < array->tokens(); ++i) {
        const int32_t id = static_cast<int32_t>(array->At(i));
        chunk.push_back(id);
        if (id == separator_id || chunk.size() == kTokenChunk) {
          if (absl::Status status = flush(); !status.ok()) return status;
        }
        if (id == separator_id) ++document;
        if ((i + 1) % kReleaseTokens == 0) array->ReleaseBefore(i + 1);
      }
      array->ReleaseBefore(array->tokens());
    }
    if (!chunk.empty()) {
      chunk.push_back(separator_id);
      if (absl::Status status = flush(); !status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<TokenArray>> arrays_;
};

// Writes the token arrays' shards, index and (given) tokenizer into
// `directory`.
absl::Status WriteTokenArrayDataset(const PrepareDatasetOptions& options,
                                    const std::string& given_model,
                                    const std::string& directory) {
  int64_t vocab_size = options.vocab_size;
  int64_t separator_id = options.separator_id;
  DatasetIndex index;
  if (!given_model.empty()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::FromSerializedModel(given_model, options.tokenizer_model);
    if (!tokenizer.ok()) return tokenizer.status();
    if (vocab_size == 0) vocab_size = (*tokenizer)->vocab_size();
    if (separator_id < 0) separator_id = (*tokenizer)->eos_id();
    if (absl::Status status =
            WriteFileSynced(absl::StrCat(directory, "/", kTokenizerFileName),
                            given_model.data(), given_model.size());
        !status.ok()) {
      return status;
    }
    index.tokenizer_file = kTokenizerFileName;
  }
  if (separator_id >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare dataset: the separator id ", separator_id,
                     " is outside the vocabulary of ", vocab_size));
  }
  absl::StatusOr<TokenStream> train_stream =
      TokenStream::Open(options.token_files, options.token_bytes);
  if (!train_stream.ok()) return train_stream.status();
  absl::StatusOr<TokenStream> validation_stream =
      TokenStream::Open(options.validation_token_files, options.token_bytes);
  if (!validation_stream.ok()) return validation_stream.status();
  absl::StatusOr<int64_t> documents =
      train_stream->CountDocuments(vocab_size, separator_id);
  if (!documents.ok()) return documents.status();
  absl::StatusOr<int64_t> validation_documents =
      validation_stream->CountDocuments(vocab_size, separator_id);
  if (!validation_documents.ok()) return validation_documents.status();
  const bool holds_out = options.validation_token_files.empty();
  if (holds_out && *documents < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the token arrays hold ", *documents, " document (separator id ",
        separator_id,
        "); at least 2 are needed (one is held out for validation)"));
  }
  if (!holds_out && (*documents < 1 || *validation_documents < 1)) {
    return absl::InvalidArgumentError(
        "the train and validation token arrays must each hold a document");
  }
  const HeldOutDocuments held_out =
      holds_out ? HeldOutDocuments(*documents, options.validation_fraction,
                                   options.seed)
                : HeldOutDocuments::None();

  const uint32_t bytes_per_token = BytesPerToken(vocab_size);
  std::vector<int64_t> token_counts(vocab_size, 0);
  ShardWriter train_writer(directory, kTrainSplit, options.shard_tokens,
                           bytes_per_token, &index.shards, &token_counts);
  ShardWriter validation_writer(directory, kValidationSplit,
                                options.shard_tokens, bytes_per_token,
                                &index.shards, nullptr);
  const int32_t separator = static_cast<int32_t>(separator_id);
  absl::Status status = train_stream->Write(separator, held_out, &train_writer,
                                            &validation_writer);
  if (status.ok()) {
    status = validation_stream->Write(separator, HeldOutDocuments::None(),
                                      &validation_writer, &validation_writer);
  }
  if (status.ok()) status = train_writer.Finish();
  if (status.ok()) status = validation_writer.Finish();
  if (!status.ok()) return status;
  // The writers flush in turns: train shards first, as the index lists them.
  std::stable_partition(
      index.shards.begin(), index.shards.end(),
      [](const ShardEntry& shard) { return shard.split == kTrainSplit; });

  index.vocab_size = vocab_size;
  index.dtype = TokenDtypeName(bytes_per_token);
  index.eos_id = separator_id;
  index.train_documents = *documents - held_out.count();
  index.validation_documents = held_out.count() + *validation_documents;
  index.train_tokens = train_writer.total_tokens();
  index.validation_tokens = validation_writer.total_tokens();
  index.unigram_entropy_nats = UnigramEntropyNats(token_counts);
  return WriteIndex(index, directory);
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
  std::vector<std::string> inputs = options.token_files;
  inputs.insert(inputs.end(), options.validation_token_files.begin(),
                options.validation_token_files.end());
  if (!options.input_directory.empty()) {
    inputs.push_back(options.input_directory);
  }
  for (const std::string& input : inputs) {
    if (absl::Status status = CheckOutputIsNotAboveInput(input, output);
        !status.ok()) {
      return status;
    }
  }
  // A given tokenizer is checked before the input is read.
  std::string given_model;
  if (!options.tokenizer_model.empty()) {
    absl::StatusOr<std::string> read = ReadGivenTokenizer(options);
    if (!read.ok()) return read.status();
    given_model = *std::move(read);
  }
  int64_t documents = 0;
  std::optional<HeldOutDocuments> held_out;
  if (options.token_files.empty()) {
    absl::StatusOr<int64_t> counted = CountDocuments(options.input_directory);
    if (!counted.ok()) return counted.status();
    documents = *counted;
    if (documents < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("corpus ", options.input_directory, " has ", documents,
                       " document; at least 2 are needed (one is held out for "
                       "validation)"));
    }
    held_out.emplace(documents, options.validation_fraction, options.seed);
  }
  return WriteDirectoryAtomically(
      output, options.overwrite, [&](const std::string& staged) {
        return options.token_files.empty()
                   ? WriteDataset(options, given_model, documents, *held_out,
                                  staged)
                   : WriteTokenArrayDataset(options, given_model, staged);
      });
}

}  // namespace plateau::engine
