#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/model_config.h"
#include "engine/train/hf_export.h"
#include "proto/job_spec.h"
#include "worker/cli/commands.h"
#include "worker/cli/flags.h"
#include "worker/cli/weights_file.h"

ABSL_FLAG(std::string, format, "hf",
          "export: the layout to write; hf (Hugging Face transformers)");
ABSL_FLAG(std::string, output, "", "export: the directory to create");
ABSL_FLAG(bool, overwrite, false,
          "export: replace an existing non-empty output directory");
ABSL_FLAG(int64_t, max_shard_bytes, int64_t{5} * 1000 * 1000 * 1000,
          "export: the largest safetensors shard (a larger tensor gets its "
          "own)");

namespace plateau::worker {
namespace {

// The architecture exported as (engine::HfArchitectureName).
absl::StatusOr<std::string> Export(const std::string& spec_path) {
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
  ASSIGN_OR_RETURN(const WeightsFile weights, WeightsFile::Open(weights_path));
  engine::HfExportOptions options;
  options.output_directory = absl::GetFlag(FLAGS_output);
  options.max_shard_bytes = absl::GetFlag(FLAGS_max_shard_bytes);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  const engine::ModelConfig config = engine::ModelConfigFromSpec(spec);
  RETURN_IF_ERROR(
      engine::ExportHuggingFace(config, weights.weights(), options));
  return engine::HfArchitectureName(config);
}

}  // namespace

int RunExportCommand(const std::vector<std::string>& arguments) {
  if (arguments.size() != 1) {
    std::cerr << "usage: plateau-worker export SPEC --weights PATH --output "
                 "DIR [--format hf] [--max_shard_bytes N] [--overwrite]\n";
    return 2;
  }
  const absl::StatusOr<std::string> architecture = Export(arguments[0]);
  if (!architecture.ok()) {
    std::cerr << "plateau-worker export: " << architecture.status().message()
              << "\n";
    return 1;
  }
  std::cout << "exported " << absl::GetFlag(FLAGS_weights) << " to "
            << absl::GetFlag(FLAGS_output) << " (Hugging Face " << *architecture
            << ")\n";
  return 0;
}

}  // namespace plateau::worker
