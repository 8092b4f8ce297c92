// plateau-data: turns text, or token ids another pipeline wrote, into
// training data (also reached as `plateau-worker data ...`, which runs this
// binary).
//   plateau-data prepare --input DIR --output DIR [--vocab N | --tokenizer
//       FILE] [--validation_fraction F] [--threads N] [--overwrite]
//   plateau-data prepare --tokens FILE[,FILE...] --output DIR --vocab N
//       --separator_id ID [--token_dtype uint16|uint32]
//       [--validation_tokens FILE[,FILE...]] [--tokenizer FILE]
//   plateau-data hf-tokenizer --tokenizer FILE --output DIR
//       --model_max_length N
//       writes the tokenizer as transformers reads it into the existing DIR
//       (engine/data/hf_tokenizer.h) and prints one JSON line of its
//       vocab_size, bos_token_id and eos_token_id (null for none): what
//       plateau-worker export runs for the tokenizer's part
// A binary of its own because SentencePiece cannot share a process with
// protobuf (see engine/data/BUILD).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "engine/data/hf_tokenizer.h"
#include "engine/data/shard_format.h"
#include "engine/data/shards.h"
#include "engine/data/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, input, "",
          "a corpus directory: the Brown corpus (NLTK word/tag files), .txt "
          "files or JSON Lines files (.jsonl, .jsonl.gz, .jsonl.zst), read "
          "as a stream");
ABSL_FLAG(std::vector<std::string>, tokens, {},
          "instead of --input: token id files, read in order as one stream "
          "of documents (.npy, or raw with --token_dtype)");
ABSL_FLAG(std::vector<std::string>, validation_tokens, {},
          "with --tokens: the validation split's token id files (nanoGPT's "
          "val.bin), instead of documents held out of --tokens");
ABSL_FLAG(std::string, token_dtype, "",
          "with --tokens: uint16 or uint32, the ids of raw files (.npy "
          "files say theirs)");
ABSL_FLAG(int64_t, separator_id, -1,
          "with --tokens: the id that ends each document (GPT-2's end of "
          "text is 50256); -1: the --tokenizer's end-of-document id");
ABSL_FLAG(std::string, output, "", "the dataset directory to create");
ABSL_FLAG(int64_t, vocab, 0,
          "vocabulary size of the tokenizer to train (default 4096); with "
          "--tokenizer, 0 or that tokenizer's size; with --tokens, the ids' "
          "vocabulary");
ABSL_FLAG(std::string, tokenizer, "",
          "an existing SentencePiece model file to encode with instead of "
          "training one; it needs an end-of-document piece (</s>)");
ABSL_FLAG(double, validation_fraction, 0.01,
          "share of documents held out for validation");
ABSL_FLAG(uint64_t, seed, 0, "chooses which documents are held out");
ABSL_FLAG(bool, overwrite, false, "replace an existing dataset directory");
ABSL_FLAG(int64_t, shard_tokens, int64_t{16} << 20,
          "tokens per shard file (a shard's buffer is held in memory)");
ABSL_FLAG(int32_t, threads, 0,
          "threads that encode text (0: one per core); the dataset does not "
          "depend on it");
ABSL_FLAG(int64_t, model_max_length, 0,
          "hf-tokenizer: the model's sequence length");

constexpr int64_t kDefaultVocabSize = 4096;

// hf-tokenizer: see the file's comment.
int RunHfTokenizer() {
  const std::string model_path = absl::GetFlag(FLAGS_tokenizer);
  const std::string directory = absl::GetFlag(FLAGS_output);
  const int64_t model_max_length = absl::GetFlag(FLAGS_model_max_length);
  if (model_path.empty() || directory.empty() || model_max_length <= 0) {
    std::cerr << "plateau-data hf-tokenizer: --tokenizer, --output and a "
                 "positive --model_max_length are required\n";
    return 2;
  }
  absl::StatusOr<std::string> serialized_model =
      plateau::ReadFileToString(model_path);
  absl::StatusOr<std::unique_ptr<plateau::engine::Tokenizer>> tokenizer =
      serialized_model.ok()
          ? plateau::engine::Tokenizer::FromSerializedModel(*serialized_model,
                                                            model_path)
          : absl::StatusOr<std::unique_ptr<plateau::engine::Tokenizer>>(
                serialized_model.status());
  absl::Status status = tokenizer.status();
  if (status.ok()) {
    status = plateau::engine::WriteHfTokenizer(**tokenizer, *serialized_model,
                                               model_max_length, directory);
  }
  if (!status.ok()) {
    std::cerr << "plateau-data hf-tokenizer: " << status.message() << "\n";
    return 1;
  }
  auto id_or_null = [](int32_t id) {
    return id < 0 ? nlohmann::json(nullptr) : nlohmann::json(id);
  };
  std::cout
      << nlohmann::json{{"vocab_size", (*tokenizer)->vocab_size()},
                        {"bos_token_id", id_or_null((*tokenizer)->bos_id())},
                        {"eos_token_id", id_or_null((*tokenizer)->eos_id())}}
             .dump()
      << "\n";
  return 0;
}

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "plateau-data prepare (--input DIR | --tokens FILE[,FILE...]) --output "
      "DIR [--vocab N] [--tokenizer FILE] [--separator_id ID] [--token_dtype "
      "uint16|uint32] [--validation_tokens FILE[,FILE...]] "
      "[--validation_fraction F] [--seed S] [--threads N] [--shard_tokens "
      "N] [--overwrite] | "
      "hf-tokenizer "
      "--tokenizer FILE --output DIR --model_max_length N";
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() == 2 && std::string(positional[1]) == "hf-tokenizer") {
    return RunHfTokenizer();
  }
  if (positional.size() != 2 || std::string(positional[1]) != "prepare") {
    std::cerr << "usage: " << kUsage << "\n";
    return 2;
  }
  plateau::engine::PrepareDatasetOptions options;
  options.input_directory = absl::GetFlag(FLAGS_input);
  options.token_files = absl::GetFlag(FLAGS_tokens);
  options.validation_token_files = absl::GetFlag(FLAGS_validation_tokens);
  options.separator_id = absl::GetFlag(FLAGS_separator_id);
  const std::string token_dtype = absl::GetFlag(FLAGS_token_dtype);
  if (token_dtype == "uint16" || token_dtype == "uint32") {
    options.token_bytes = token_dtype == "uint16" ? 2 : 4;
  } else if (!token_dtype.empty()) {
    std::cerr << "plateau-data prepare: --token_dtype must be uint16 or "
                 "uint32, not "
              << token_dtype << "\n";
    return 2;
  }
  options.output_directory = absl::GetFlag(FLAGS_output);
  options.tokenizer_model = absl::GetFlag(FLAGS_tokenizer);
  options.vocab_size = absl::GetFlag(FLAGS_vocab);
  if (options.tokenizer_model.empty() && options.token_files.empty() &&
      options.vocab_size == 0) {
    options.vocab_size = kDefaultVocabSize;
  }
  options.validation_fraction = absl::GetFlag(FLAGS_validation_fraction);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  options.encode_threads = absl::GetFlag(FLAGS_threads);
  options.shard_tokens = absl::GetFlag(FLAGS_shard_tokens);
  if (options.input_directory.empty() == options.token_files.empty() ||
      options.output_directory.empty()) {
    std::cerr << "plateau-data prepare: --output and one of --input and "
                 "--tokens are required\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = plateau::engine::PrepareDataset(options);
  // The summary comes from the index: opening the dataset would map (and
  // keep resident) every shard just written.
  absl::StatusOr<plateau::engine::DatasetIndex> index =
      status.ok() ? plateau::engine::ReadDatasetIndex(options.output_directory)
                  : absl::StatusOr<plateau::engine::DatasetIndex>(status);
  if (!index.ok()) {
    std::cerr << "plateau-data prepare: " << index.status().message() << "\n";
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const int64_t tokens = index->train_tokens + index->validation_tokens;
  std::cout << absl::StrFormat(
      "prepared %s in %.1f s (%.3g tokens/s): vocab %d, %d train tokens, %d "
      "validation tokens, unigram entropy %.3f nats/token\n",
      options.output_directory, seconds, tokens / std::max(seconds, 1e-9),
      index->vocab_size, index->train_tokens, index->validation_tokens,
      index->unigram_entropy_nats);
  return 0;
}
