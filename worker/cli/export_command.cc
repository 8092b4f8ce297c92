#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/data/token_dataset.h"
#include "engine/model/model_config.h"
#include "engine/train/hf_export.h"
#include "nlohmann/json.hpp"
#include "proto/job_spec.h"
#include "worker/cli/commands.h"
#include "worker/cli/data_tool.h"
#include "worker/cli/flags.h"
#include "worker/cli/weights_file.h"

ABSL_FLAG(std::string, format, "hf",
          "export: the layout to write; hf (Hugging Face transformers)");
ABSL_FLAG(int64_t, max_shard_bytes, int64_t{5} * 1000 * 1000 * 1000,
          "export: the largest safetensors shard (a larger tensor gets its "
          "own)");
ABSL_FLAG(std::string, tokenizer, "",
          "export: the SentencePiece model to write beside the weights; "
          "default: the tokenizer of the spec's data.path, if it has one; "
          "none: no tokenizer");

namespace plateau::worker {
namespace {

constexpr char kNoTokenizer[] = "none";

// The tokenizer to export: --tokenizer, else the spec's dataset's. Empty
// for none, with *why_none saying why.
std::string TokenizerToExport(const v1::JobSpec& spec, std::string* why_none) {
  const std::string flag = absl::GetFlag(FLAGS_tokenizer);
  if (flag == kNoTokenizer) {
    *why_none = "--tokenizer=none";
    return "";
  }
  if (!flag.empty()) return flag;
  const absl::StatusOr<std::unique_ptr<engine::TokenDataset>> dataset =
      engine::TokenDataset::Open(spec.data().path());
  if (!dataset.ok()) {
    *why_none = absl::StrCat("the spec's data.path is no dataset here (",
                             dataset.status().message(), ")");
    return "";
  }
  if ((*dataset)->tokenizer_path().empty()) {
    *why_none = absl::StrCat(spec.data().path(),
                             " was prepared from token ids without one");
  }
  return (*dataset)->tokenizer_path();
}

// plateau-data hf-tokenizer's JSON line.
absl::StatusOr<engine::HfTokenizerIds> ParseTokenizerIds(
    const std::string& line) {
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
  if (json.is_discarded() || !json.is_object() ||
      !json.value("vocab_size", nlohmann::json()).is_number_integer()) {
    return absl::InternalError(absl::StrCat(
        "plateau-data hf-tokenizer printed '", line, "', not its ids"));
  }
  engine::HfTokenizerIds ids;
  ids.vocab_size = json["vocab_size"].get<int64_t>();
  for (const auto& [key, id] : {std::pair{"bos_token_id", &ids.bos_id},
                                std::pair{"eos_token_id", &ids.eos_id}}) {
    const nlohmann::json value = json.value(key, nlohmann::json());
    *id = value.is_number_integer() ? value.get<int32_t>() : -1;
  }
  return ids;
}

struct Exported {
  std::string architecture;  // engine::HfArchitectureName
  std::string tokenizer;     // its path; empty for none
  std::string why_no_tokenizer;
};

absl::StatusOr<Exported> Export(const std::string& spec_path) {
  if (absl::GetFlag(FLAGS_format) != "hf") {
    return absl::InvalidArgumentError(absl::StrCat("export: unknown --format '",
                                                   absl::GetFlag(FLAGS_format),
                                                   "'; expected hf"));
  }
  const std::string weights_path = absl::GetFlag(FLAGS_weights);
  if (weights_path.empty() || absl::GetFlag(FLAGS_output).empty()) {
    return absl::InvalidArgumentError("export needs --weights and --output");
  }
  ASSIGN_OR_RETURN(const v1::JobSpec spec, ReadJobSpecFile(spec_path));
  const engine::ModelConfig config = engine::ModelConfigFromSpec(spec);
  ASSIGN_OR_RETURN(const WeightsFile weights,
                   WeightsFile::Open(weights_path, config));
  if (weights.plateau_weights() == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: --weights ", weights.source(),
                     " is already a Hugging Face model directory"));
  }
  engine::HfExportOptions options;
  options.output_directory = absl::GetFlag(FLAGS_output);
  options.max_shard_bytes = absl::GetFlag(FLAGS_max_shard_bytes);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  Exported exported;
  exported.tokenizer = TokenizerToExport(spec, &exported.why_no_tokenizer);
  if (!exported.tokenizer.empty()) {
    options.write_tokenizer = [&](const std::string& directory)
        -> absl::StatusOr<engine::HfTokenizerIds> {
      ASSIGN_OR_RETURN(
          const std::string line,
          RunDataTool({"hf-tokenizer",
                       absl::StrCat("--tokenizer=", exported.tokenizer),
                       absl::StrCat("--output=", directory),
                       absl::StrCat("--model_max_length=", config.seq_len)}));
      return ParseTokenizerIds(line);
    };
  }
  RETURN_IF_ERROR(
      engine::ExportHuggingFace(config, *weights.plateau_weights(), options));
  exported.architecture = engine::HfArchitectureName(config);
  return exported;
}

}  // namespace

int RunExportCommand(const std::vector<std::string>& arguments) {
  if (arguments.size() != 1) {
    std::cerr << "usage: plateau-worker export SPEC --weights PATH --output "
                 "DIR [--format hf] [--max_shard_bytes N] [--overwrite] "
                 "[--tokenizer FILE|none]\n";
    return 2;
  }
  const absl::StatusOr<Exported> exported = Export(arguments[0]);
  if (!exported.ok()) {
    std::cerr << "plateau-worker export: " << exported.status().message()
              << "\n";
    return 1;
  }
  std::cout << "exported " << absl::GetFlag(FLAGS_weights) << " to "
            << absl::GetFlag(FLAGS_output) << " (Hugging Face "
            << exported->architecture << ")\n";
  if (exported->tokenizer.empty()) {
    std::cout << "no tokenizer (" << exported->why_no_tokenizer
              << "); --tokenizer FILE writes one\n";
  } else {
    std::cout << "tokenizer: " << exported->tokenizer
              << " (for transformers' LlamaTokenizer)\n";
  }
  return 0;
}

}  // namespace plateau::worker
