// plateau-data: turns text into training data (also reached as
// `plateau-worker data ...`, which runs this binary).
//   plateau-data prepare --input DIR --output DIR [--vocab N | --tokenizer
//       FILE] [--validation_fraction F] [--overwrite]
// A binary of its own because SentencePiece cannot share a process with
// protobuf (see engine/data/BUILD).
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "engine/data/shards.h"
#include "engine/data/token_dataset.h"

ABSL_FLAG(std::string, input, "",
          "a corpus directory: the Brown corpus (NLTK word/tag files) or .txt "
          "files");
ABSL_FLAG(std::string, output, "", "the dataset directory to create");
ABSL_FLAG(int64_t, vocab, 0,
          "vocabulary size of the tokenizer to train (default 4096); with "
          "--tokenizer, 0 or that tokenizer's size");
ABSL_FLAG(std::string, tokenizer, "",
          "an existing SentencePiece model file to encode with instead of "
          "training one; it needs an end-of-document piece (</s>)");
ABSL_FLAG(double, validation_fraction, 0.01,
          "share of documents held out for validation");
ABSL_FLAG(uint64_t, seed, 0, "chooses which documents are held out");
ABSL_FLAG(bool, overwrite, false, "replace an existing dataset directory");

constexpr int64_t kDefaultVocabSize = 4096;

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "plateau-data prepare --input DIR --output DIR [--vocab N | "
      "--tokenizer FILE] [--validation_fraction F] [--seed S] [--overwrite]";
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() != 2 || std::string(positional[1]) != "prepare") {
    std::cerr << "usage: " << kUsage << "\n";
    return 2;
  }
  plateau::engine::PrepareDatasetOptions options;
  options.input_directory = absl::GetFlag(FLAGS_input);
  options.output_directory = absl::GetFlag(FLAGS_output);
  options.tokenizer_model = absl::GetFlag(FLAGS_tokenizer);
  options.vocab_size = absl::GetFlag(FLAGS_vocab);
  if (options.tokenizer_model.empty() && options.vocab_size == 0) {
    options.vocab_size = kDefaultVocabSize;
  }
  options.validation_fraction = absl::GetFlag(FLAGS_validation_fraction);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  if (options.input_directory.empty() || options.output_directory.empty()) {
    std::cerr << "plateau-data prepare: --input and --output are required\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = plateau::engine::PrepareDataset(options);
  absl::StatusOr<std::unique_ptr<plateau::engine::TokenDataset>> dataset =
      status.ok()
          ? plateau::engine::TokenDataset::Open(options.output_directory)
          : absl::StatusOr<std::unique_ptr<plateau::engine::TokenDataset>>(
                status);
  if (!dataset.ok()) {
    std::cerr << "plateau-data prepare: " << dataset.status().message() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat(
      "prepared %s in %.1f s: vocab %d, %d train tokens, %d validation "
      "tokens, unigram entropy %.3f nats/token\n",
      options.output_directory,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      (*dataset)->vocab_size(), (*dataset)->train_tokens(),
      (*dataset)->validation_tokens(), (*dataset)->unigram_entropy_nats());
  return 0;
}
