#include "engine/train/trainer.h"

#include <array>
#include <chrono>
#include <cmath>
#include <exception>
#include <iostream>
#include <limits>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/learning_rate.h"
#include "engine/optim/tiered_optimizer.h"
#include "engine/train/evaluation.h"
#include "engine/train/hf_layout.h"
#include "engine/train/hf_model_directory.h"
#include "nlohmann/json.hpp"
#include "proto/job_spec.h"

namespace plateau::engine {
namespace {

constexpr char kStateFormat[] = "plateau-training-state";
constexpr int kStateVersion = 1;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

AdamWSettings AdamWSettingsOf(const v1::JobSpec& spec, int host_threads) {
  AdamWSettings settings;
  settings.beta1 = static_cast<float>(spec.optimizer().betas(0));
  settings.beta2 = static_cast<float>(spec.optimizer().betas(1));
  settings.weight_decay = static_cast<float>(spec.optimizer().weight_decay());
  settings.offload = OptimizerOffloadOf(spec.schedules().optimizer_offload());
  settings.host_threads = host_threads;
  return settings;
}

TieredSettings TieredSettingsOf(const v1::JobSpec& spec, int host_threads) {
  TieredSettings settings;
  settings.kind = TieredKindOf(spec.optimizer().kind());
  settings.beta1 = static_cast<float>(spec.optimizer().betas(0));
  settings.beta2 = static_cast<float>(spec.optimizer().betas(1));
  settings.weight_decay = static_cast<float>(spec.optimizer().weight_decay());
  settings.expert_momentum =
      MomentumStorageOf(spec.optimizer().expert_momentum());
  settings.offload = OptimizerOffloadOf(spec.schedules().optimizer_offload());
  settings.host_threads = host_threads;
  return settings;
}

// False for a `schedules: auto` spec the planner has not resolved yet: one
// of the four schedules it chooses is still unset.
bool SchedulesChosen(const v1::ScheduleSpec& schedules) {
  return !schedules.auto_() ||
         (schedules.has_dispatch_chunk_tokens() && schedules.has_ring_dtp() &&
          schedules.has_sco() &&
          schedules.optimizer_offload() != v1::OPTIMIZER_OFFLOAD_UNSPECIFIED);
}

// The whole model's optimizer state under the spec's optimizer.
TensorShapes OptimizerStateShapes(const v1::JobSpec& spec,
                                  const ModelConfig& config) {
  if (spec.optimizer().kind() == v1::OPTIMIZER_KIND_ADAMW) {
    return AdamWStateShapes(config);
  }
  return TieredStateShapes(config, TieredSettingsOf(spec, 1));
}

// max / mean of each layer's expert load.
std::vector<double> LoadImbalance(
    const std::vector<std::vector<int64_t>>& expert_tokens) {
  std::vector<double> ratios;
  for (const std::vector<int64_t>& layer : expert_tokens) {
    int64_t total = 0;
    int64_t most = 0;
    for (int64_t tokens : layer) {
      total += tokens;
      most = std::max(most, tokens);
    }
    ratios.push_back(total == 0 ? 1.0
                                : static_cast<double>(most) * layer.size() /
                                      static_cast<double>(total));
  }
  return ratios;
}

}  // namespace

ParallelSizes ParallelSizesOf(const v1::JobSpec& spec) {
  ParallelSizes sizes;
  sizes.ep = spec.parallel().ep();
  sizes.pp = spec.parallel().pp();
  sizes.dp = spec.parallel().dp();
  return sizes;
}

Trainer::Trainer(const v1::JobSpec& spec, const TrainerOptions& options,
                 std::ostream* log)
    : spec_(spec), options_(options), log_(log) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const v1::JobSpec& spec, const TrainerOptions& options, std::ostream* log) {
  // The engine reads an unset schedule as its default; an auto spec must not
  // run with defaults nobody chose for these devices.
  if (!SchedulesChosen(spec.schedules())) {
    return absl::InvalidArgumentError(
        "schedules: auto: the schedules have not been chosen yet (plateaud "
        "chooses them at submit; for a standalone run use plateau-worker "
        "train, which plans them for --device_memory)");
  }
  const ParallelLayout layout(ParallelSizesOf(spec));
  if (options.rank < 0 || options.rank >= layout.world()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside the spec's ",
                     layout.world(), " ranks (parallel ep*pp*dp)"));
  }
  if (layout.world() > 1 && options.groups == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the spec asks for ", layout.world(),
        " ranks (parallel ep*pp*dp); run it with --world ", layout.world()));
  }
  std::unique_ptr<Trainer> trainer(new Trainer(spec, options, log));
  trainer->ranks_ = RankContext(layout, options.rank, options.groups);
  // A rank whose set-up fails (its data, its memory) tells the others
  // rather than leaving them waiting in the first collective.
  RETURN_IF_ERROR(
      trainer->AgreeOnOutcome(trainer->SetUp(), "setting up the rank"));
  // Rank 0 draws the write id; a sum over the world hands it to every rank
  // (exactly: below 2^53).
  double write_nonce = options.rank == 0
                           ? static_cast<double>(absl::Uniform<uint64_t>(
                                 absl::BitGen(), 0, uint64_t{1} << 40))
                           : 0.0;
  if (trainer->ranks_.world != nullptr) {
    RETURN_IF_ERROR(trainer->ranks_.world->AllReduceSum(&write_nonce, 1));
  }
  trainer->background_checkpoints_ =
      spec.train().checkpoint_write() != v1::CHECKPOINT_WRITE_BLOCKING;
  trainer->write_id_ = absl::StrFormat("%d-%010x", options.attempt,
                                       static_cast<uint64_t>(write_nonce));
  RETURN_IF_ERROR(trainer->StartFromCheckpoints());
  trainer->LogStartup();
  return trainer;
}

absl::Status Trainer::SetUp() {
  const v1::JobSpec& spec = spec_;
  const RankContext& ranks = ranks_;
  const ModelConfig config = ModelConfigFromSpec(spec);
  sequences_ = spec.data().batch_tokens() / config.seq_len;

  ASSIGN_OR_RETURN(dataset_, TokenDataset::Open(spec.data().path()));
  const TokenDataset& dataset = *dataset_;
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
  const int64_t capped_windows =
      std::max<int64_t>(1, options_.max_validation_tokens / config.seq_len);
  validation_windows_ =
      std::min(dataset.ValidationWindows(config.seq_len), capped_windows);
  if (spec.train().eval_every() > 0 && validation_windows_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.eval_every: ", spec.data().path(),
        " has no validation window of ", config.seq_len + 1,
        " tokens (model.seq_len + 1); use 0 or more validation data"));
  }

  if (options_.create_backend) {
    ASSIGN_OR_RETURN(backend_, options_.create_backend());
  } else {
    backend_ =
        Backend::CreateCpu(options_.threads, options_.device_memory_bytes);
  }
  const ModelShard shard =
      ModelShard::ForRank(config, ranks.pp_index, ranks.sizes.pp,
                          ranks.ep_index, ranks.sizes.ep, ranks.sizes.dp);
  ASSIGN_OR_RETURN(model_,
                   Model::Create(config, shard, &backend_->ops(),
                                 &backend_->allocator(), ranks.model_groups()));
  RETURN_IF_ERROR(model_->InitializeWeights(spec.train().seed()));
  shards_ =
      std::make_unique<ZeroShards>(model_->layout(), ranks.batch, ranks.data);
  if (spec.optimizer().kind() == v1::OPTIMIZER_KIND_ADAMW) {
    ASSIGN_OR_RETURN(optimizer_,
                     AdamWOptimizer::Create(
                         AdamWSettingsOf(spec, options_.threads),
                         &model_->layout(), shards_->owned(),
                         model_->weight_buffers(), model_->gradient_buffers(),
                         &backend_->ops(), &backend_->allocator()));
  } else {
    ASSIGN_OR_RETURN(
        optimizer_,
        TieredOptimizer::Create(
            TieredSettingsOf(spec, options_.threads), &model_->layout(),
            shards_->owned(), ranks.batch, ranks.data, model_->weight_buffers(),
            model_->gradient_buffers(), &backend_->ops(),
            &backend_->allocator()));
  }
  InitializeMasters(spec.train().seed(), model_->layout(),
                    optimizer_->MasterPieces());
  step_ = std::make_unique<TrainingStep>(
      ranks, model_.get(), shards_.get(), optimizer_.get(),
      MicroBatchesOf(spec.train()), &backend_->allocator());
  record_.expert_tokens.assign(config.layers,
                               std::vector<int64_t>(config.experts, 0));
  return backend_->ops().status();
}

absl::Status Trainer::AgreeOnOutcome(const absl::Status& status,
                                     const char* what, bool* all_reported) {
  if (ranks_.world == nullptr) {
    if (all_reported != nullptr) *all_reported = true;
    return status;
  }
  // Entry r is 1 when rank r failed.
  std::vector<double> failed(ranks_.world->size(), 0.0);
  failed[ranks_.rank] = status.ok() ? 0.0 : 1.0;
  RETURN_IF_ERROR(ranks_.world->AllReduceSum(
      failed.data(), static_cast<int64_t>(failed.size())));
  if (all_reported != nullptr) *all_reported = true;
  if (!status.ok()) return status;
  for (size_t rank = 0; rank < failed.size(); ++rank) {
    if (failed[rank] != 0.0) {
      return absl::AbortedError(absl::StrCat(what, " failed on rank ", rank,
                                             " (its error is in its log)"));
    }
  }
  return absl::OkStatus();
}

std::ostream& Trainer::rank_log() {
  return ranks_.rank == 0 ? *log_ : std::cerr;
}

absl::Status Trainer::StartFromCheckpoints() {
  // Rank 0 looks; everyone follows its answer, so all ranks load the same
  // checkpoint even if the directory changes meanwhile.
  // found: 0 for none, else the checkpoint's step + 1.
  double found = 0.0;
  absl::Status looked = absl::OkStatus();
  if (ranks_.rank == 0) {
    // Claimed before looking: once claimed, an attempt this one replaces
    // cannot commit a newer checkpoint behind its back.
    absl::StatusOr<RunFence> fence =
        RunFence::Claim(options_.run_directory, options_.attempt);
    if (fence.ok()) fence_ = *std::move(fence);
    if (!fence.ok()) looked = fence.status();
  }
  int64_t below_step = std::numeric_limits<int64_t>::max();
  // Checkpoints passed over because a rank found a damaged chunk.
  std::vector<std::string> damaged_directories;
  while (true) {
    if (ranks_.rank == 0 && looked.ok()) {
      // A damaged newer checkpoint (a torn or corrupted file) is passed over
      // for the newest intact one, and said so.
      std::vector<std::string> damaged;
      absl::StatusOr<std::unique_ptr<Checkpoint>> latest = OpenLatestCheckpoint(
          options_.run_directory, &damaged, PosixFileSystem(), below_step);
      for (const std::string& reason : damaged) {
        log() << "resume: passing over " << reason << "\n";
      }
      if (latest.ok()) {
        found = static_cast<double>((*latest)->step()) + 1;
        if (!options_.resume) {
          looked = absl::FailedPreconditionError(absl::StrCat(
              options_.run_directory, " already holds checkpoints (the newest ",
              (*latest)->directory(),
              "); pass --resume to continue that run, or choose "
              "another run directory"));
        }
      } else if (!absl::IsNotFound(latest.status())) {
        looked = latest.status();
      }
    }
    RETURN_IF_ERROR(AgreeOnOutcome(looked, "looking for checkpoints"));
    if (ranks_.world != nullptr) {
      RETURN_IF_ERROR(ranks_.world->AllReduceSum(&found, 1));
    }
    if (found == 0.0 && !damaged_directories.empty()) {
      // Starting over would write checkpoints that replace them.
      return absl::DataLossError(absl::StrCat(
          "every checkpoint in ", options_.run_directory,
          " that the ranks tried is damaged (",
          absl::StrJoin(damaged_directories, ", "),
          "; each rank's log names the chunks); move them aside to start "
          "afresh"));
    }
    if (found == 0.0) {
      if (options_.resume) {
        log() << "resume: no complete checkpoint in " << options_.run_directory
              << "; starting from step 0\n";
      }
      if (spec_.init_from().empty()) return absl::OkStatus();
      return AgreeOnOutcome(LoadInitialWeights(), "loading init_from");
    }
    const int64_t step = static_cast<int64_t>(found) - 1;
    const std::string directory =
        CheckpointDirectory(options_.run_directory, step);
    // A chunk that fails its checksum on any rank sends every rank to the
    // previous checkpoint; any other failure ends the start.
    const absl::Status loaded = LoadCheckpoint(directory);
    // Entry r is 1 when rank r found a damaged chunk.
    std::vector<double> damaged(ranks_.sizes.world(), 0.0);
    if (absl::IsDataLoss(loaded)) {
      damaged[ranks_.rank] = 1.0;
      rank_log() << "resume: rank " << ranks_.rank << " passes over "
                 << directory << ": " << loaded.message() << "\n";
    }
    if (ranks_.world != nullptr) {
      RETURN_IF_ERROR(ranks_.world->AllReduceSum(
          damaged.data(), static_cast<int64_t>(damaged.size())));
    }
    std::vector<int> damaged_ranks;
    for (int rank = 0; rank < ranks_.sizes.world(); ++rank) {
      if (damaged[rank] > 0.0) damaged_ranks.push_back(rank);
    }
    if (!damaged_ranks.empty()) {
      log() << "resume: passing over " << directory << ": rank"
            << (damaged_ranks.size() > 1 ? "s " : " ")
            << absl::StrJoin(damaged_ranks, ", ")
            << " found damaged chunks in it\n";
      damaged_directories.push_back(directory);
      below_step = step;
      found = 0.0;
      continue;
    }
    RETURN_IF_ERROR(AgreeOnOutcome(loaded, "loading the checkpoint"));
    break;
  }
  // Each rank loaded the weights of its own shards: the replicas get theirs.
  RETURN_IF_ERROR(shards_->GatherWeights(
      model_->weight_buffers(), backend_->ops(), backend_->allocator()));
  RETURN_IF_ERROR(
      AgreeOnOutcome(backend_->ops().status(), "gathering the weights"));
  last_checkpoint_ =
      CheckpointDirectory(options_.run_directory, completed_steps_);
  last_checkpoint_step_ = completed_steps_;
  log() << "resume: continuing after step " << completed_steps_ << " from "
        << last_checkpoint_ << "\n";
  // What each rank read: version 2 lets a rank read only its shards.
  std::vector<double> bytes_read(2 * ranks_.sizes.world(), 0.0);
  bytes_read[2 * ranks_.rank] = static_cast<double>(checkpoint_bytes_read_);
  bytes_read[2 * ranks_.rank + 1] = static_cast<double>(checkpoint_bytes_);
  if (ranks_.world != nullptr) {
    RETURN_IF_ERROR(ranks_.world->AllReduceSum(
        bytes_read.data(), static_cast<int64_t>(bytes_read.size())));
  }
  double most = 0.0;
  double total = 0.0;
  for (int rank = 0; rank < ranks_.sizes.world(); ++rank) {
    most = std::max(most, bytes_read[2 * rank]);
    total += bytes_read[2 * rank];
  }
  log() << "resume: read " << FormatBytes(static_cast<int64_t>(total))
        << " of the checkpoint's " << FormatBytes(checkpoint_bytes_)
        << " tensor data over " << ranks_.sizes.world() << " ranks, at most "
        << FormatBytes(static_cast<int64_t>(most)) << " on one\n";
  // Bitwise resume holds on the kernels that made the checkpoint: another
  // CPU type (or SIMD level) goes on from it, but not bit for bit as it
  // would have on those.
  if (!checkpoint_kernels_.empty() &&
      checkpoint_kernels_ != backend_->kernels()) {
    log() << "resume: the checkpoint was made by other kernels ("
          << checkpoint_kernels_ << "; these are " << backend_->kernels()
          << "): the run goes on, but not bit for bit as it would have on "
             "those\n";
  }
  const std::string precision = PrecisionName(model_->config());
  if (!checkpoint_precision_.empty() && checkpoint_precision_ != precision) {
    log() << "resume: the checkpoint was trained in " << checkpoint_precision_
          << " products; continuing in " << precision << "\n";
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadCheckpoint(const std::string& directory) {
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint,
                   Checkpoint::Open(directory));
  const ModelConfig& config = model_->config();
  // The training state first, so that a checkpoint of another run is
  // refused before any tensor is read.
  int64_t step = 0;
  std::string kernels;
  std::string precision;
  TrainingRecord record;
  try {
    const nlohmann::json state =
        nlohmann::json::parse(checkpoint->state_json());
    if (state.at("format") != kStateFormat ||
        state.at("version").get<int>() != kStateVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat(directory, ": training state of an unknown format"));
    }
    if (state.at("seed").get<uint64_t>() != spec_.train().seed()) {
      return absl::FailedPreconditionError(absl::StrCat(
          directory, ": written with seed ", state.at("seed").get<uint64_t>(),
          ", but the spec's train.seed is ", spec_.train().seed()));
    }
    step = state.at("step").get<int64_t>();
    kernels = state.value("kernels", "");
    precision = state.value("precision", "");
    ASSIGN_OR_RETURN(record, TrainingRecordFromJson(state.at("record").dump()));
  } catch (const std::exception& error) {
    return absl::DataLossError(
        absl::StrCat(directory, ": unreadable training state: ", error.what()));
  }
  if (record.expert_tokens.size() != static_cast<size_t>(config.layers)) {
    return absl::DataLossError(absl::StrCat(
        directory, ": training record has expert load for ",
        record.expert_tokens.size(), " layers, the model ", config.layers));
  }
  // This rank's shards of the weights; GatherWeights fills the replicas.
  std::vector<TensorPiece> targets =
      OwnedWeightPieces(*model_, shards_->owned(), /*trained=*/true,
                        /*untrained=*/true);
  for (TensorPiece& master : optimizer_->MasterPieces()) {
    targets.push_back(std::move(master));
  }
  RETURN_IF_ERROR(
      LoadWeights(checkpoint->weights(), config, targets, backend_->ops()));
  RETURN_IF_ERROR(LoadPieces(checkpoint->optimizer_state(),
                             OptimizerStateShapes(spec_, config),
                             optimizer_->StatePieces(), backend_->ops()));
  completed_steps_ = step;
  checkpoint_kernels_ = std::move(kernels);
  checkpoint_precision_ = std::move(precision);
  record_ = std::move(record);
  checkpoint_bytes_read_ = checkpoint->weights().bytes_read() +
                           checkpoint->optimizer_state().bytes_read();
  checkpoint_bytes_ = 0;
  for (const auto& [name, bytes] : checkpoint->files()) {
    if (name != kStateFileName) checkpoint_bytes_ += bytes;
  }
  return absl::OkStatus();
}

std::vector<TensorPiece> Trainer::WeightTargets() {
  std::vector<TensorPiece> targets =
      WeightPieces(*model_, /*dense=*/true, /*experts=*/true);
  for (TensorPiece& master : optimizer_->MasterPieces()) {
    targets.push_back(std::move(master));
  }
  return targets;
}

absl::Status Trainer::LoadInitialWeights() {
  const auto in_init_from = [](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("init_from: ", status.message()));
  };
  absl::StatusOr<std::unique_ptr<HfModelDirectory>> opened =
      HfModelDirectory::Open(spec_.init_from(), model_->config());
  if (!opened.ok()) return in_init_from(opened.status());
  const HfModelDirectory& directory = **opened;
  // The data's ids must be the ids the weights were trained on.
  const std::string tokenizer = directory.TokenizerModelPath();
  if (!tokenizer.empty() && !dataset_->tokenizer_path().empty()) {
    absl::StatusOr<std::string> theirs = ReadFileToString(tokenizer);
    if (!theirs.ok()) return in_init_from(theirs.status());
    absl::StatusOr<std::string> ours =
        ReadFileToString(dataset_->tokenizer_path());
    if (!ours.ok()) return ours.status();
    if (*theirs != *ours) {
      return absl::FailedPreconditionError(absl::StrCat(
          "init_from: ", tokenizer, " is not the tokenizer data.path ",
          spec_.data().path(),
          " was prepared with, so its ids would mean other pieces to the "
          "model; prepare the data with --tokenizer ",
          tokenizer));
    }
  }
  LoadHfWeights(directory, WeightTargets(), backend_->ops());
  RETURN_IF_ERROR(backend_->ops().status());
  log() << "init_from: starting from " << directory.directory() << " ("
        << HfArchitectureName(model_->config()) << ", " << directory.dtypes()
        << ")"
        << (tokenizer.empty() ? "; it has no tokenizer.model to compare with "
                                "the data's"
                              : "")
        << "\n";
  return absl::OkStatus();
}

void Trainer::LogStartup() {
  const ModelConfig& config = model_->config();
  int64_t parameters = 0;
  for (const auto& [name, shape] : WeightShapes(config)) {
    parameters += ShapeElements(shape);
  }
  const std::string shared =
      config.shared_experts > 0
          ? absl::StrFormat(" + %d shared (ffn %d)", config.shared_experts,
                            config.shared_ffn_hidden)
          : "";
  log() << absl::StrFormat(
      "model: %d layers, d_model %d, %d heads (%d key-value%s), %d experts "
      "(top %d)%s, ffn %d, vocab %d%s, seq_len %d: %.2fM parameters\n",
      config.layers, config.d_model, config.heads, config.kv_heads,
      config.qk_norm ? ", QK-norm" : "", config.experts, config.top_k, shared,
      config.ffn_hidden, config.vocab,
      config.tie_embeddings ? " (tied embeddings)" : "", config.seq_len,
      parameters / 1e6);
  log() << "backend: " << backend_->description() << "\n";
  log() << "precision: "
        << PrecisionDescription(PrecisionName(config),
                                config.bf16_weight_storage,
                                config.bf16_gradients)
        << (options_.precision_reason.empty()
                ? ""
                : absl::StrCat(" (", options_.precision_reason, ")"))
        << "\n";
  if (ranks_.sizes.world() > 1) {
    log() << absl::StrFormat(
        "parallel: %d ranks (ep %d x dp %d x pp %d); rank 0 holds layers "
        "%d-%d and experts %d-%d of each\n",
        ranks_.sizes.world(), ranks_.sizes.ep, ranks_.sizes.dp, ranks_.sizes.pp,
        model_->layout().shard().first_layer,
        model_->layout().shard().first_layer +
            model_->layout().shard().layer_count - 1,
        model_->layout().shard().first_expert,
        model_->layout().shard().first_expert +
            model_->layout().shard().expert_count - 1);
  }
  std::vector<std::string> tiers;
  int64_t state_bytes = 0;
  for (const auto& [tier, bytes] : optimizer_->StateBytesByTier()) {
    tiers.push_back(absl::StrCat(tier, " ", FormatBytes(bytes)));
    state_bytes += bytes;
  }
  std::vector<std::string> schedules;
  if (config.dispatch_chunk_tokens > 0) {
    schedules.push_back(
        absl::StrCat("dispatch_chunk_tokens ", config.dispatch_chunk_tokens));
  }
  if (config.vocab_block > 0) {
    schedules.push_back(absl::StrCat("ring_dtp (vocabulary blocks of ",
                                     config.vocab_block, ")"));
  }
  if (config.offload_checkpoints) schedules.push_back("sco");
  if (spec_.schedules().optimizer_offload() != v1::OPTIMIZER_OFFLOAD_NONE) {
    schedules.push_back(
        absl::StrCat("optimizer_offload ",
                     SpecEnumName(*v1::OptimizerOffload_descriptor(),
                                  spec_.schedules().optimizer_offload())));
  }
  log() << "schedules: "
        << (schedules.empty() ? "none" : absl::StrJoin(schedules, ", "))
        << "\n";
  log()
      << "optimizer: "
      << SpecEnumName(*v1::OptimizerKind_descriptor(), spec_.optimizer().kind())
      << (spec_.optimizer().kind() == v1::OPTIMIZER_KIND_SKEWADAM
              ? absl::StrCat(" (expert momentum ",
                             SpecEnumName(*v1::ExpertMomentum_descriptor(),
                                          spec_.optimizer().expert_momentum()),
                             ")")
              : "")
      << " state " << FormatBytes(state_bytes) << " on this rank"
      << (spec_.schedules().optimizer_offload() == v1::OPTIMIZER_OFFLOAD_NONE
              ? ""
              : ", in host memory")
      << " (" << absl::StrJoin(tiers, ", ") << "); unsharded AdamW would hold "
      << FormatBytes(parameters * 2 * static_cast<int64_t>(sizeof(float)))
      << "\n";
  log() << absl::StrFormat(
      "data: %s, %d train tokens, %d validation tokens, unigram entropy %.3f "
      "nats/token\n",
      spec_.data().path(), dataset_->train_tokens(),
      dataset_->validation_tokens(), dataset_->unigram_entropy_nats());
  log() << absl::StrFormat(
      "training: %d steps of %d sequences (%d tokens) in %d micro-batches\n",
      spec_.train().steps(), sequences_, sequences_ * config.seq_len,
      MicroBatchesOf(spec_.train()));
}

absl::StatusOr<Trainer::BeforeStep> Trainer::AgreeBeforeStep() {
  // Ranks asked to stop, and ranks whose checkpoint write is still running:
  // one all-reduce for both, before every step.
  constexpr int kStopping = 0, kWriting = 1;
  std::array<double, 2> counts = {};
  counts[kStopping] =
      options_.stop_requested != nullptr && options_.stop_requested->load()
          ? 1.0
          : 0.0;
  counts[kWriting] =
      pending_checkpoint_.has_value() && !writer_.finished() ? 1.0 : 0.0;
  if (ranks_.world != nullptr) {
    RETURN_IF_ERROR(ranks_.world->AllReduceSum(counts.data(), counts.size()));
  }
  BeforeStep agreed;
  agreed.stop = counts[kStopping] > 0.0;
  // Every rank holds a pending checkpoint at the same steps.
  agreed.commit = pending_checkpoint_.has_value() && counts[kWriting] == 0.0;
  return agreed;
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
  if (options_.on_progress) options_.on_progress(*this);
  while (completed_steps_ < train.steps()) {
    ASSIGN_OR_RETURN(const BeforeStep agreed, AgreeBeforeStep());
    if (agreed.commit) RETURN_IF_ERROR(FinishCheckpoint());
    if (agreed.stop) {
      // The write in flight is committed first: no finished step is lost.
      RETURN_IF_ERROR(WriteCheckpoint());
      return absl::CancelledError(
          absl::StrCat("stopped after step ", completed_steps_,
                       "; checkpoint at ", last_checkpoint_));
    }
    const int64_t step = completed_steps_ + 1;
    RETURN_IF_ERROR(TrainStep(step, &tokens));
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
      // The last step's checkpoint ends the run: it is waited for.
      RETURN_IF_ERROR(background_checkpoints_ && step < train.steps()
                          ? StartCheckpoint(/*background=*/true)
                          : WriteCheckpoint());
    }
    // Ranks' clocks differ: rank 0's decides for everyone.
    double out_of_time = ranks_.rank == 0 && time_limit_seconds > 0 &&
                                 SecondsSince(start) > time_limit_seconds
                             ? 1.0
                             : 0.0;
    if (ranks_.world != nullptr && time_limit_seconds > 0) {
      RETURN_IF_ERROR(ranks_.world->AllReduceSum(&out_of_time, 1));
    }
    if (options_.on_progress) options_.on_progress(*this);
    if (out_of_time > 0.0 && step < train.steps()) {
      RETURN_IF_ERROR(WriteCheckpoint());
      return absl::DeadlineExceededError(absl::StrCat(
          "train.time_limit of ", time_limit_seconds, " s reached after step ",
          step, "; checkpoint at ", last_checkpoint_));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::TrainStep(int64_t step, std::vector<int32_t>* tokens) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& config = model_->config();
  dataset_->TrainBatch(spec_.train().seed(), step, sequences_, config.seq_len,
                       tokens->data());
  StepRecord record;
  record.step = step;
  record.learning_rate = LearningRateAt(
      step, spec_.train().steps(), static_cast<float>(spec_.optimizer().lr()),
      spec_.optimizer().warmup_steps());
  ASSIGN_OR_RETURN(const StepResult result,
                   step_->Run(tokens->data(), sequences_,
                              static_cast<float>(record.learning_rate), step,
                              spec_.optimizer().grad_clip()));
  // A failed kernel leaves zeros behind: no step counts after one.
  RETURN_IF_ERROR(backend_->ops().status());
  record.cross_entropy = result.cross_entropy;
  record.load_balancing = result.load_balancing;
  record.z_loss = result.z_loss;
  record.loss = result.cross_entropy + result.load_balancing + result.z_loss;
  record.gradient_norm = result.gradient_norm;
  record.expert_load_imbalance = LoadImbalance(result.expert_tokens);
  for (int64_t l = 0; l < config.layers; ++l) {
    for (int64_t e = 0; e < config.experts; ++e) {
      record_.expert_tokens[l][e] += result.expert_tokens[l][e];
    }
  }
  record.tokens = sequences_ * config.seq_len;
  record.seconds = SecondsSince(start);
  record_.steps.push_back(record);
  completed_steps_ = step;
  return absl::OkStatus();
}

void Trainer::LogStep(const StepRecord& step, double tokens_per_second) {
  const MemoryUsage device =
      backend_->allocator().PoolUsage(MemoryPool::kDevice);
  const auto worst = std::max_element(step.expert_load_imbalance.begin(),
                                      step.expert_load_imbalance.end());
  const std::string z_loss = model_->config().z_loss_coefficient > 0.0f
                                 ? absl::StrFormat("  z %.4f", step.z_loss)
                                 : std::string();
  log() << absl::StrFormat(
      "step %5d/%d  loss %.4f  ce %.4f  aux %.4f%s  lr %.2e  grad_norm %.3f  "
      "expert load max/mean %.2f (layer %d)  %.0f tokens/s  device peak %s\n",
      step.step, spec_.train().steps(), step.loss, step.cross_entropy,
      step.load_balancing, z_loss, step.learning_rate, step.gradient_norm,
      *worst, worst - step.expert_load_imbalance.begin(), tokens_per_second,
      FormatBytes(device.peak_bytes));
  log().flush();
}

absl::Status Trainer::Validate(int64_t step) {
  const int64_t seq_len = model_->config().seq_len;
  const int64_t rank_sequences = std::max<int64_t>(
      1, sequences_ / MicroBatchesOf(spec_.train()) / ranks_.batch_ranks());
  ASSIGN_OR_RETURN(
      const EvaluationResult result,
      EvaluateWindows(*model_, ranks_, validation_windows_, rank_sequences,
                      [this, seq_len](int64_t index, int32_t* out) {
                        dataset_->ValidationWindow(index, seq_len, out);
                      }));
  RETURN_IF_ERROR(backend_->ops().status());
  record_.validations.push_back(
      {step, result.cross_entropy, result.perplexity, result.predicted_tokens});
  log() << absl::StrFormat(
      "validation after step %d: loss %.4f  perplexity %.2f  (%d windows, %d "
      "tokens)\n",
      step, result.cross_entropy, result.perplexity, result.windows,
      result.predicted_tokens);
  return absl::OkStatus();
}

absl::Status Trainer::WriteCheckpoint() {
  RETURN_IF_ERROR(StartCheckpoint(/*background=*/false));
  return pending_checkpoint_.has_value() ? FinishCheckpoint()
                                         : absl::OkStatus();
}

absl::Status Trainer::StartCheckpoint(bool background) {
  if (last_checkpoint_step_ == completed_steps_ && !last_checkpoint_.empty()) {
    return absl::OkStatus();  // saved
  }
  if (pending_checkpoint_.has_value()) {
    if (pending_checkpoint_->step == completed_steps_) return absl::OkStatus();
    // At most one write in flight: the next waits for it.
    RETURN_IF_ERROR(FinishCheckpoint());
  }
  const auto start = std::chrono::steady_clock::now();
  kernels::Ops& ops = backend_->ops();
  // Every rank writes its ZeRO shards, so each element is written once: the
  // weights' (from an offloaded optimizer's masters, which hold them in
  // float32; the planner decides this from the setting as well,
  // plan/rank_replay.cc) and its own optimizer state.
  const bool from_masters =
      spec_.schedules().optimizer_offload() != v1::OPTIMIZER_OFFLOAD_NONE;
  std::vector<TensorPiece> weights;
  if (from_masters) weights = optimizer_->MasterPieces();
  for (TensorPiece& piece :
       OwnedWeightPieces(*model_, shards_->owned(), /*trained=*/!from_masters,
                         /*untrained=*/true)) {
    weights.push_back(std::move(piece));
  }
  absl::StatusOr<ShardSnapshot> snapshot = SnapshotShard(
      weights, optimizer_->StatePieces(), ops, backend_->allocator());
  // A rank whose copies failed holds zeros: it must not write them, and
  // every rank stops here with it.
  absl::Status copied = snapshot.ok() ? ops.status() : snapshot.status();
  if (!copied.ok()) {
    copied =
        absl::Status(copied.code(),
                     absl::StrCat("cannot copy checkpoint of step ",
                                  completed_steps_, " to host memory: rank ",
                                  ranks_.rank, "'s shard: ", copied.message()));
  }
  RETURN_IF_ERROR(
      AgreeOnOutcome(copied, "copying the checkpoint's shards to host memory"));
  PendingCheckpoint pending;
  pending.step = completed_steps_;
  pending.background = background;
  pending.staging = ShardStagingDirectory(options_.run_directory,
                                          completed_steps_, write_id_);
  // The state as of this step: the commit may come steps later.
  if (ranks_.rank == 0) pending.state_json = StateJson();
  ShardWriteOptions write_options;
  if (options_.checkpoint_file_system != nullptr) {
    write_options.file_system = options_.checkpoint_file_system;
  }
  writer_.Start(*std::move(snapshot), pending.staging, ranks_.rank,
                std::move(write_options));
  pending.stall_seconds = SecondsSince(start);
  pending_checkpoint_ = std::move(pending);
  return absl::OkStatus();
}

absl::Status Trainer::FinishCheckpoint() {
  const auto start = std::chrono::steady_clock::now();
  PendingCheckpoint pending = *std::move(pending_checkpoint_);
  pending_checkpoint_.reset();
  absl::StatusOr<BackgroundWriteResult> result = writer_.Wait();
  absl::Status written = result.status();
  BackgroundWriteResult write;
  if (result.ok()) write = *result;
  if (!written.ok()) {
    written = absl::Status(
        written.code(),
        absl::StrCat("cannot write checkpoint of step ", pending.step, " in ",
                     options_.run_directory, ": rank ", ranks_.rank,
                     "'s shard: ", written.message()));
  }
  bool all_reported = false;
  const absl::Status agreed =
      AgreeOnOutcome(written, "writing the checkpoint's shards", &all_reported);
  if (!agreed.ok()) {
    // Once every rank has said how its write ended none writes there any
    // more, so the failed write's files can go; else the next commit
    // removes them.
    if (ranks_.rank == 0 && all_reported) {
      PosixFileSystem().RemoveAll(pending.staging).IgnoreError();
    }
    return agreed;
  }
  absl::Status committed = absl::OkStatus();
  if (ranks_.rank == 0) committed = CommitCheckpoint(pending);
  RETURN_IF_ERROR(AgreeOnOutcome(committed, "committing the checkpoint"));
  last_checkpoint_bytes_written_ = write.files.bytes_written;
  // Entry r: rank r's bytes; entry world + r: its write's seconds.
  const int world = ranks_.sizes.world();
  std::vector<double> writes(2 * world, 0.0);
  writes[ranks_.rank] = static_cast<double>(write.files.bytes_written);
  writes[world + ranks_.rank] = write.write_seconds;
  if (ranks_.world != nullptr) {
    RETURN_IF_ERROR(ranks_.world->AllReduceSum(
        writes.data(), static_cast<int64_t>(writes.size())));
  }
  CheckpointWriteRecord record;
  record.step = pending.step;
  record.background = pending.background;
  record.stall_seconds = pending.stall_seconds + SecondsSince(start);
  for (int rank = 0; rank < world; ++rank) {
    const auto bytes = static_cast<int64_t>(writes[rank]);
    record.bytes_written += bytes;
    record.most_bytes_written = std::max(record.most_bytes_written, bytes);
    record.write_seconds = std::max(record.write_seconds, writes[world + rank]);
  }
  record_.checkpoint_writes.push_back(record);
  last_checkpoint_ = CheckpointDirectory(options_.run_directory, pending.step);
  last_checkpoint_step_ = pending.step;
  log() << "checkpoint: " << last_checkpoint_ << " ("
        << FormatBytes(record.bytes_written) << " from " << world
        << " ranks, at most " << FormatBytes(record.most_bytes_written)
        << " from one, written in "
        << absl::StrFormat("%.0f", record.write_seconds * 1000) << " ms"
        << (record.background && pending.step < completed_steps_
                ? absl::StrCat(" while steps ", pending.step + 1, "-",
                               completed_steps_, " trained")
                : "")
        << "; training stood still "
        << absl::StrFormat("%.0f", record.stall_seconds * 1000) << " ms)\n";
  return absl::OkStatus();
}

std::string Trainer::StateJson() const {
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
  // What made it: a resume elsewhere says so (StartFromCheckpoints), and
  // eval of an auto spec computes as it was trained.
  state["kernels"] = backend_->kernels();
  state["precision"] = PrecisionName(model_->config());
  return state.dump();
}

absl::Status Trainer::CommitCheckpoint(const PendingCheckpoint& pending) {
  CheckpointShapes expected;
  expected.weights = WeightShapes(model_->config());
  expected.optimizer_state = OptimizerStateShapes(spec_, model_->config());
  ShardedCommitOptions options;
  options.keep_last = options_.keep_checkpoints;
  options.fence = &*fence_;
  return CommitShardedCheckpoint(options_.run_directory, pending.step,
                                 pending.staging, ranks_.sizes.world(),
                                 expected, pending.state_json, options)
      .status();
}

}  // namespace plateau::engine
