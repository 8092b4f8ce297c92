#include "worker/engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/optim/adamw_optimizer.h"
#include "worker/engine/optim/gradient_clipping.h"
#include "worker/engine/optim/learning_rate.h"
#include "worker/engine/train/evaluation.h"
#include "worker/engine/train/model_io.h"

namespace plateau::engine {
namespace {

constexpr char kStateFormat[] = "plateau-training-state";
constexpr int kStateVersion = 1;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// What this single-rank build cannot run yet, named field by field.
absl::Status CheckSupported(const v1::JobSpec& spec) {
  std::vector<std::string> problems;
  const v1::ParallelSpec& parallel = spec.parallel();
  if (parallel.ep() * parallel.pp() * parallel.dp() != 1) {
    problems.push_back(absl::StrCat(
        "parallel: ep*pp*dp = ", parallel.ep() * parallel.pp() * parallel.dp(),
        ", but this engine trains on a single rank (ep = pp = dp = 1)"));
  }
  const v1::ScheduleSpec& schedules = spec.schedules();
  if (schedules.dispatch_chunk_tokens() != 0) {
    problems.push_back(
        "schedules.dispatch_chunk_tokens: chunked dispatch is not available "
        "in this build; use 0");
  }
  if (schedules.ring_dtp()) {
    problems.push_back(
        "schedules.ring_dtp: not available in this build; use false");
  }
  if (schedules.sco()) {
    problems.push_back("schedules.sco: not available in this build; use false");
  }
  if (schedules.optimizer_offload() != v1::OPTIMIZER_OFFLOAD_NONE) {
    problems.push_back(
        "schedules.optimizer_offload: not available in this build; use none");
  }
  if (spec.optimizer().kind() != v1::OPTIMIZER_KIND_ADAMW) {
    problems.push_back("optimizer.kind: only adamw is available in this build");
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrJoin(problems, "\n"));
}

}  // namespace

Trainer::Trainer(const v1::JobSpec& spec, const TrainerOptions& options,
                 std::ostream* log)
    : spec_(spec), options_(options), log_(log) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const v1::JobSpec& spec, const TrainerOptions& options, std::ostream* log) {
  RETURN_IF_ERROR(CheckSupported(spec));
  std::unique_ptr<Trainer> trainer(new Trainer(spec, options, log));
  const ModelConfig config = ModelConfigFromSpec(spec);
  trainer->sequences_ = spec.data().batch_tokens() / config.seq_len;

  ASSIGN_OR_RETURN(trainer->dataset_, TokenDataset::Open(spec.data().path()));
  const TokenDataset& dataset = *trainer->dataset_;
  if (dataset.vocab_size() > config.vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.path: ", spec.data().path(), " has a vocabulary of ",
        dataset.vocab_size(), " tokens, more than model.vocab ", config.vocab));
  }
  if (dataset.TrainWindowStarts(config.seq_len) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.path: ", spec.data().path(), " has no training window of ",
        config.seq_len + 1, " tokens (model.seq_len + 1)"));
  }

  trainer->backend_ =
      Backend::CreateCpu(options.threads, options.device_memory_bytes);
  Backend& backend = *trainer->backend_;
  ASSIGN_OR_RETURN(trainer->model_,
                   Model::Create(config, &backend.ops(), &backend.allocator()));
  trainer->model_->InitializeWeights(spec.train().seed());
  AdamWSettings settings;
  settings.beta1 = static_cast<float>(spec.optimizer().betas(0));
  settings.beta2 = static_cast<float>(spec.optimizer().betas(1));
  settings.weight_decay = static_cast<float>(spec.optimizer().weight_decay());
  ASSIGN_OR_RETURN(
      trainer->optimizer_,
      AdamWOptimizer::Create(
          settings, &trainer->model_->layout(), &trainer->model_->weights(),
          &trainer->model_->gradients(), &backend.ops(), &backend.allocator()));
  if (options.resume) RETURN_IF_ERROR(trainer->Resume());
  trainer->LogStartup();
  return trainer;
}

absl::Status Trainer::Resume() {
  absl::StatusOr<std::string> latest =
      FindLatestCheckpoint(options_.run_directory);
  if (absl::IsNotFound(latest.status())) {
    *log_ << "resume: no complete checkpoint in " << options_.run_directory
          << "; starting from step 0\n";
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(latest.status());
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint,
                   Checkpoint::Open(*latest));
  RETURN_IF_ERROR(LoadWeights(checkpoint->weights(), *model_));
  RETURN_IF_ERROR(LoadOptimizerState(checkpoint->optimizer_state(), *optimizer_,
                                     backend_->ops()));
  try {
    const nlohmann::json state =
        nlohmann::json::parse(checkpoint->state_json());
    if (state.at("format") != kStateFormat ||
        state.at("version").get<int>() != kStateVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat(*latest, ": training state of an unknown format"));
    }
    if (state.at("seed").get<uint64_t>() != spec_.train().seed()) {
      return absl::FailedPreconditionError(absl::StrCat(
          *latest, ": written with seed ", state.at("seed").get<uint64_t>(),
          ", but the spec's train.seed is ", spec_.train().seed()));
    }
    completed_steps_ = state.at("step").get<int64_t>();
    ASSIGN_OR_RETURN(record_,
                     TrainingRecordFromJson(state.at("record").dump()));
  } catch (const std::exception& error) {
    return absl::DataLossError(
        absl::StrCat(*latest, ": unreadable training state: ", error.what()));
  }
  last_checkpoint_ = *latest;
  *log_ << "resume: continuing after step " << completed_steps_ << " from "
        << *latest << "\n";
  return absl::OkStatus();
}

void Trainer::LogStartup() {
  const ModelConfig& config = model_->config();
  const int64_t parameters = model_->layout().total_elements();
  *log_ << absl::StrFormat(
      "model: %d layers, d_model %d, %d heads, %d experts (top %d), ffn %d, "
      "vocab %d, seq_len %d: %.2fM parameters\n",
      config.layers, config.d_model, config.heads, config.experts, config.top_k,
      config.ffn_hidden, config.vocab, config.seq_len, parameters / 1e6);
  *log_ << "backend: " << backend_->description() << "\n";
  std::vector<std::string> tiers;
  int64_t state_bytes = 0;
  for (const auto& [tier, bytes] : optimizer_->StateBytesByTier()) {
    tiers.push_back(absl::StrCat(tier, " ", FormatBytes(bytes)));
    state_bytes += bytes;
  }
  *log_ << "optimizer: " << v1::OptimizerKind_Name(spec_.optimizer().kind())
        << " state " << FormatBytes(state_bytes) << " ("
        << absl::StrJoin(tiers, ", ") << "); AdamW would hold "
        << FormatBytes(parameters * 8) << "\n";
  *log_ << absl::StrFormat(
      "data: %s, %d train tokens, %d validation tokens, unigram entropy %.3f "
      "nats/token\n",
      spec_.data().path(), dataset_->train_tokens(),
      dataset_->validation_tokens(), dataset_->unigram_entropy_nats());
  *log_ << absl::StrFormat("training: %d steps of %d sequences (%d tokens)\n",
                           spec_.train().steps(), sequences_,
                           sequences_ * config.seq_len);
}

absl::Status Trainer::Run() {
  const auto start = std::chrono::steady_clock::now();
  const v1::TrainSpec& train = spec_.train();
  const double time_limit_seconds =
      train.has_time_limit() ? static_cast<double>(train.time_limit().seconds())
                             : 0.0;
  std::vector<int32_t> tokens(sequences_ * (model_->config().seq_len + 1));
  int64_t interval_tokens = 0;
  double interval_seconds = 0.0;
  while (completed_steps_ < train.steps()) {
    if (options_.stop_requested != nullptr && options_.stop_requested->load()) {
      RETURN_IF_ERROR(WriteCheckpoint());
      return absl::CancelledError(
          absl::StrCat("stopped after step ", completed_steps_,
                       "; checkpoint at ", last_checkpoint_));
    }
    const int64_t step = completed_steps_ + 1;
    RETURN_IF_ERROR(TrainStep(step, tokens));
    const StepRecord& done = record_.steps.back();
    interval_tokens += done.tokens;
    interval_seconds += done.seconds;
    if (step % options_.log_every_steps == 0 || step == train.steps() ||
        step == 1) {
      LogStep(done, interval_tokens / std::max(interval_seconds, 1e-9));
      interval_tokens = 0;
      interval_seconds = 0.0;
    }
    if (train.eval_every() > 0 &&
        (step % train.eval_every() == 0 || step == train.steps())) {
      RETURN_IF_ERROR(Validate(step));
    }
    if (step == train.steps() || (train.checkpoint_every() > 0 &&
                                  step % train.checkpoint_every() == 0)) {
      RETURN_IF_ERROR(WriteCheckpoint());
    }
    if (time_limit_seconds > 0 && SecondsSince(start) > time_limit_seconds &&
        step < train.steps()) {
      RETURN_IF_ERROR(WriteCheckpoint());
      return absl::DeadlineExceededError(absl::StrCat(
          "train.time_limit of ", time_limit_seconds, " s reached after step ",
          step, "; checkpoint at ", last_checkpoint_));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::TrainStep(int64_t step, std::vector<int32_t>& tokens) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& config = model_->config();
  dataset_->TrainBatch(spec_.train().seed(), step, sequences_, config.seq_len,
                       tokens.data());
  model_->ZeroGradients();
  ASSIGN_OR_RETURN(const StepLoss loss,
                   model_->ForwardBackward(tokens.data(), sequences_));
  if (!std::isfinite(loss.total())) {
    return absl::InternalError(
        absl::StrCat("loss became ", loss.total(), " at step ", step,
                     "; lower optimizer.lr or raise optimizer.warmup_steps"));
  }
  StepRecord record;
  record.step = step;
  record.cross_entropy = loss.cross_entropy;
  record.load_balancing = loss.load_balancing;
  record.loss = loss.total();
  record.gradient_norm = ClipGradientNorm(backend_->ops(), model_->gradients(),
                                          spec_.optimizer().grad_clip());
  record.learning_rate = LearningRateAt(
      step, spec_.train().steps(), static_cast<float>(spec_.optimizer().lr()),
      spec_.optimizer().warmup_steps());
  optimizer_->Step(static_cast<float>(record.learning_rate), step);
  record.tokens = sequences_ * config.seq_len;
  record.seconds = SecondsSince(start);
  record_.steps.push_back(record);
  completed_steps_ = step;
  return absl::OkStatus();
}

void Trainer::LogStep(const StepRecord& step, double tokens_per_second) {
  const MemoryUsage device =
      backend_->allocator().PoolUsage(MemoryPool::kDevice);
  *log_ << absl::StrFormat(
      "step %5d/%d  loss %.4f  ce %.4f  aux %.4f  lr %.2e  grad_norm %.3f  "
      "%.0f tokens/s  device peak %s\n",
      step.step, spec_.train().steps(), step.loss, step.cross_entropy,
      step.load_balancing, step.learning_rate, step.gradient_norm,
      tokens_per_second, FormatBytes(device.peak_bytes));
  log_->flush();
}

absl::Status Trainer::Validate(int64_t step) {
  const int64_t seq_len = model_->config().seq_len;
  const int64_t windows =
      std::min(dataset_->ValidationWindows(seq_len),
               std::max<int64_t>(1, options_.max_validation_tokens / seq_len));
  ASSIGN_OR_RETURN(
      const EvaluationResult result,
      EvaluateWindows(*model_, windows, sequences_,
                      [this, seq_len](int64_t index, int32_t* out) {
                        dataset_->ValidationWindow(index, seq_len, out);
                      }));
  record_.validations.push_back(
      {step, result.cross_entropy, result.perplexity, result.predicted_tokens});
  *log_ << absl::StrFormat(
      "validation after step %d: loss %.4f  perplexity %.2f  (%d windows, %d "
      "tokens)\n",
      step, result.cross_entropy, result.perplexity, result.windows,
      result.predicted_tokens);
  return absl::OkStatus();
}

absl::Status Trainer::WriteCheckpoint() {
  if (!last_checkpoint_.empty() &&
      last_checkpoint_ ==
          CheckpointDirectory(options_.run_directory, completed_steps_)) {
    return absl::OkStatus();  // this step is already saved
  }
  AccountedAllocator& allocator = backend_->allocator();
  ASSIGN_OR_RETURN(HostSnapshot weights, SnapshotWeights(*model_, allocator));
  ASSIGN_OR_RETURN(HostSnapshot optimizer,
                   SnapshotOptimizer(*optimizer_, backend_->ops(), allocator));
  nlohmann::json state;
  state["format"] = kStateFormat;
  state["version"] = kStateVersion;
  state["step"] = completed_steps_;
  state["seed"] = spec_.train().seed();
  // Batches are a pure function of (seed, step): the data position is the
  // next step, and there is no other random state.
  state["data"] = {{"sampler", "uniform-windows"},
                   {"next_step", completed_steps_ + 1}};
  state["record"] = nlohmann::json::parse(TrainingRecordToJson(record_));
  CheckpointContents contents;
  contents.weights = weights.views;
  contents.optimizer_state = optimizer.views;
  contents.weights_metadata = {{"format", "pt"}};
  contents.state_json = state.dump();
  ASSIGN_OR_RETURN(
      last_checkpoint_,
      engine::WriteCheckpoint(options_.run_directory, completed_steps_,
                              contents, options_.keep_checkpoints));
  *log_ << "checkpoint: " << last_checkpoint_ << "\n";
  return absl::OkStatus();
}

}  // namespace plateau::engine
