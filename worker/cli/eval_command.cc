#include <iostream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/data/token_dataset.h"
#include "engine/train/evaluation.h"
#include "engine/train/model_io.h"
#include "engine/train/run_summary.h"
#include "plan/precision_choice.h"
#include "proto/job_spec.h"
#include "worker/cli/commands.h"
#include "worker/cli/flags.h"
#include "worker/cli/local_precision.h"
#include "worker/cli/rank_backend.h"
#include "worker/cli/weights_file.h"

namespace plateau::worker {
namespace {

// The spec with the precision it is evaluated in: for precision: auto, the
// one a checkpoint given as --weights was trained in (its state.json says),
// else --precision, else chosen for this machine as train chooses it.
absl::StatusOr<v1::JobSpec> EvaluatedSpec(v1::JobSpec spec) {
  RETURN_IF_ERROR(ApplyPrecisionFlags(/*launched_rank=*/false, &spec).status());
  if (!plan::IsAutoPrecision(spec)) return spec;
  const std::string weights = absl::GetFlag(FLAGS_weights);
  if (IsDirectory(weights)) {
    absl::StatusOr<std::unique_ptr<engine::Checkpoint>> checkpoint =
        engine::Checkpoint::Open(weights);
    const std::optional<v1::Precision> trained =
        checkpoint.ok() ? TrainedPrecision(**checkpoint) : std::nullopt;
    if (trained.has_value()) {
      spec.set_precision(*trained);
      std::cout << "precision: "
                << (*trained == v1::PRECISION_FP32 ? "fp32" : "bf16")
                << " (auto: as the checkpoint was trained)\n";
      return spec;
    }
  }
  ASSIGN_OR_RETURN(const RankBackend backend,
                   RankBackendFromFlags(/*local_rank=*/0, ThreadsPerRank(1)));
  ASSIGN_OR_RETURN(const plan::PrecisionChoice choice,
                   ChooseLocalPrecision(spec, backend));
  spec.set_precision(choice.precision);
  std::cout << "precision: "
            << (choice.precision == v1::PRECISION_FP32 ? "fp32" : "bf16")
            << " (" << choice.reason << ")\n";
  return spec;
}

absl::StatusOr<engine::EvaluationResult> Evaluate(const v1::JobSpec& spec,
                                                  engine::Backend& backend,
                                                  std::string* source) {
  const engine::ModelConfig config = engine::ModelConfigFromSpec(spec);
  const std::string weights = absl::GetFlag(FLAGS_weights);
  const std::string tokens = absl::GetFlag(FLAGS_tokens);
  if (weights.empty() || tokens.empty()) {
    return absl::InvalidArgumentError("eval needs --weights and --tokens");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model,
                   engine::Model::CreateForEvaluation(config, &backend.ops(),
                                                      &backend.allocator()));
  ASSIGN_OR_RETURN(const WeightsFile weights_file,
                   WeightsFile::Open(weights, config));
  *source = weights_file.source();
  RETURN_IF_ERROR(weights_file.LoadInto(*model));
  const int64_t batch =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_batch_sequences));
  const int64_t seq_len = config.seq_len;
  if (IsDirectory(tokens)) {
    ASSIGN_OR_RETURN(std::unique_ptr<engine::TokenDataset> dataset,
                     engine::TokenDataset::Open(tokens));
    return engine::EvaluateWindows(
        *model, engine::RankContext(), dataset->ValidationWindows(seq_len),
        batch, [&](int64_t index, int32_t* out) {
          dataset->ValidationWindow(index, seq_len, out);
        });
  }
  ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                   engine::ReadRawTokenFile(tokens, config.vocab));
  const int64_t windows = static_cast<int64_t>(ids.size()) >= seq_len + 1
                              ? (static_cast<int64_t>(ids.size()) - 1) / seq_len
                              : 0;
  return engine::EvaluateWindows(*model, engine::RankContext(), windows, batch,
                                 [&](int64_t index, int32_t* out) {
                                   std::copy_n(ids.begin() + index * seq_len,
                                               seq_len + 1, out);
                                 });
}

// The backend eval runs on, from the flags a train rank takes (--backend,
// --cuda_devices, --cuda_matmul, --device_memory).
absl::StatusOr<std::unique_ptr<engine::Backend>> EvaluationBackend() {
  ASSIGN_OR_RETURN(const RankBackend rank_backend,
                   RankBackendFromFlags(/*local_rank=*/0, ThreadsPerRank(1)));
  return BackendFactoryOf(rank_backend)();
}

}  // namespace

int RunEvalCommand(const std::vector<std::string>& arguments) {
  if (arguments.size() != 1) {
    std::cerr << "usage: plateau-worker eval SPEC --weights PATH --tokens FILE "
                 "[--batch_sequences N] [--summary_json FILE] [--backend "
                 "cpu|cuda] [--device_memory BYTES]\n";
    return 2;
  }
  engine::RunSummary summary;
  summary.command = "eval";
  std::unique_ptr<engine::Backend> backend;
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpecFile(arguments[0]);
  if (spec.ok()) spec = EvaluatedSpec(*std::move(spec));
  if (!spec.ok()) {
    summary.status = spec.status();
  } else if (absl::StatusOr<std::unique_ptr<engine::Backend>> created =
                 EvaluationBackend();
             !created.ok()) {
    summary.status = created.status();
  } else {
    backend = *std::move(created);
    absl::StatusOr<engine::EvaluationResult> result =
        Evaluate(*spec, *backend, &summary.checkpoint);
    summary.status = result.status();
    summary.allocator = &backend->allocator();
    if (result.ok()) {
      summary.evaluation = *result;
      std::cout << absl::StrFormat(
          "cross_entropy %.6f  perplexity %.4f  (%d windows, %d predicted "
          "tokens)\n",
          result->cross_entropy, result->perplexity, result->windows,
          result->predicted_tokens);
    }
  }
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    const absl::Status written = engine::WriteRunSummary(path, summary);
    if (!written.ok()) std::cerr << "plateau-worker: " << written << "\n";
  }
  if (!summary.status.ok()) {
    std::cerr << "plateau-worker eval: " << summary.status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace plateau::worker
