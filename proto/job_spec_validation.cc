// The rules of a job spec that go beyond types (docs/ARCHITECTURE.md section
// 7): ranges, and relations between fields. Required keys are checked while
// reading (kRequiredPaths in job_spec.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "proto/job_spec.h"
#include "proto/job_spec_internal.h"

namespace plateau {
namespace job_spec_internal {
namespace {

using google::protobuf::EnumDescriptor;
using v1::JobSpec;

// Bounds of the numeric rules.
constexpr size_t kMaxNameLength = 63;
constexpr int64_t kMaxPriority = 1000;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMinDModel = 8;
constexpr int64_t kMaxDModel = 65536;
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxFfnHidden = 1048576;
constexpr int64_t kMaxVocab = 4194304;
constexpr double kMaxLearningRate = 10.0;
// Rotary bases in use run from 1e4 to 1e6 (Llama 3: 5e5; Qwen3: 1e6); a base
// at or below 1 would not lower the frequencies from pair to pair.
constexpr double kMaxRopeTheta = 1e9;
constexpr double kMaxRmsEpsilon = 1e-2;
constexpr double kMaxAuxLossCoefficient = 1.0;
// ST-MoE and OLMoE use 1e-3.
constexpr double kMaxZLossCoefficient = 1.0;
constexpr double kMaxBiasUpdateRate = 1.0;
constexpr int64_t kMaxRestarts = 100;
constexpr int64_t kMaxMicroBatches = 4096;
constexpr int64_t kMaxSteps = 1000000000;
constexpr int64_t kMaxPathLength = 4096;
// Bounds on what the sizes above make together. Each is far above any
// model a cluster of today's devices holds, and low enough that every size
// the engine and the planner compute from the spec fits in int64 with room
// to spare: a rank's buffers of one micro-batch (at most 2^40 elements
// each), summed over every layer and micro-batch in flight, stay below
// 2^58 bytes. Each dispatch chunk is an exchange round of the engine's
// and a loop of the planner's, so their count is bounded too.
constexpr double kMaxParameters = double{int64_t{1} << 41};
constexpr double kMaxBufferElements = double{int64_t{1} << 40};
constexpr int64_t kMaxDispatchChunks = 4096;

// Each shared expert's hidden width: shared_ffn_hidden, or ffn_hidden when
// the spec leaves it out.
int64_t SharedFfnHiddenOf(const v1::ModelSpec& model) {
  return model.has_shared_ffn_hidden() ? model.shared_ffn_hidden()
                                       : model.ffn_hidden();
}

// Validation: the rules of docs/ARCHITECTURE.md section 7 on a complete
// JobSpec. Each check returns whether the field is usable by the rules that
// relate it to other fields, so a bad value is reported once, not again by
// every rule it takes part in.

class SpecValidator {
 public:
  SpecValidator(const JobSpec& spec, Problems* problems)
      : spec_(spec), problems_(*problems) {}

  void Validate() {
    ValidateName();
    InRange("priority", spec_.priority(), 0, kMaxPriority);
    // Unspecified is the default, auto; anything else must be a known one.
    if (spec_.precision() != v1::PRECISION_UNSPECIFIED) {
      KnownEnum("precision", spec_.precision(), *v1::Precision_descriptor());
    }
    ValidateResourcesAndParallel();
    ValidateModel();
    ValidateSchedules();
    ValidateGradientAccumulation();
    ValidateOptimizer();
    ValidateData();
    ValidateTrain();
    WithinPathLength("init_from", spec_.init_from());
    ValidateSizes();
  }

 private:
  // False (and silent) if `path` was already reported while reading.
  bool Unreported(absl::string_view path) const {
    return !problems_.Covers(path);
  }

  bool InRange(absl::string_view path, int64_t value, int64_t min, int64_t max,
               absl::string_view note = "") {
    if (!Unreported(path)) return false;
    if (value >= min && value <= max) return true;
    problems_.Add(path,
                  absl::StrCat(value, " is not in ", min, "..", max, note));
    return false;
  }

  bool AtLeast(absl::string_view path, int64_t value, int64_t min,
               absl::string_view note = "") {
    if (!Unreported(path)) return false;
    if (value >= min) return true;
    problems_.Add(path, absl::StrCat(value, " must be at least ", min, note));
    return false;
  }

  void WithinPathLength(absl::string_view path, const std::string& value) {
    if (Unreported(path) && value.size() > kMaxPathLength) {
      problems_.Add(
          path, absl::StrCat("is ", value.size(), " characters long; at most ",
                             kMaxPathLength, " are allowed"));
    }
  }

  // A finite value >= 0.
  void NonNegative(absl::string_view path, double value,
                   absl::string_view note = "") {
    if (Unreported(path) && !(value >= 0 && std::isfinite(value))) {
      problems_.Add(path, absl::StrCat(FormatDouble(value),
                                       " must be a number >= 0", note));
    }
  }

  // A defined enum value other than UNSPECIFIED.
  void KnownEnum(absl::string_view path, int value,
                 const EnumDescriptor& type) {
    if (Unreported(path) && EnumYamlName(type, value).empty()) {
      problems_.Add(path, absl::StrCat("must be one of ", EnumChoices(type)));
    }
  }

  void ValidateName();
  void ValidateResourcesAndParallel();
  void ValidateModel();
  void ValidateSchedules();
  void ValidateGradientAccumulation();
  void ValidateOptimizer();
  void ValidateData();
  void ValidateTrain();
  void ValidateSizes();

  const JobSpec& spec_;
  Problems& problems_;
  // Set by ValidateResourcesAndParallel for the model and data rules.
  bool ep_usable_ = false;
  bool pp_usable_ = false;
  bool dp_usable_ = false;
  // Set by ValidateModel for the data rules and the sizes.
  bool seq_len_usable_ = false;
  bool model_usable_ = false;
  // Set by ValidateData and ValidateTrain for the sizes.
  bool batch_usable_ = false;
  bool micro_batches_usable_ = false;
};

void SpecValidator::ValidateName() {
  const std::string& name = spec_.name();
  if (!Unreported("name")) return;
  if (name.empty()) {
    problems_.Add("name", "required");
  } else if (name.size() > kMaxNameLength) {
    problems_.Add("name", absl::StrCat(Quote(name), " is ", name.size(),
                                       " characters long; at most ",
                                       kMaxNameLength, " are allowed"));
  } else if (!absl::ascii_islower(name[0])) {
    problems_.Add("name",
                  absl::StrCat(Quote(name), " must start with a letter a-z"));
  } else if (!std::all_of(name.begin(), name.end(), [](char c) {
               return absl::ascii_islower(c) || absl::ascii_isdigit(c) ||
                      c == '-';
             })) {
    problems_.Add("name", absl::StrCat(Quote(name),
                                       " may contain only a-z, 0-9 and '-'"));
  }
}

void SpecValidator::ValidateResourcesAndParallel() {
  const v1::Resources& resources = spec_.resources();
  const v1::ParallelSpec& parallel = spec_.parallel();
  const bool nodes_usable =
      InRange("resources.nodes", resources.nodes(), 1, kMaxNodes);
  const bool devices_usable =
      InRange("resources.devices_per_node", resources.devices_per_node(), 1,
              kMaxDevicesPerNode);
  ep_usable_ = AtLeast("parallel.ep", parallel.ep(), 1);
  pp_usable_ = AtLeast("parallel.pp", parallel.pp(), 1);
  dp_usable_ = AtLeast("parallel.dp", parallel.dp(), 1);
  if (!(nodes_usable && devices_usable && ep_usable_ && pp_usable_ &&
        dp_usable_)) {
    return;
  }
  const int64_t devices =
      int64_t{resources.nodes()} * resources.devices_per_node();
  // Each factor is below 2^31, so the product of three fits in a double
  // exactly enough to compare with a device count of at most 2^16.
  const double ranks =
      double{1} * parallel.ep() * parallel.pp() * parallel.dp();
  if (ranks != static_cast<double>(devices)) {
    problems_.Add(
        "parallel",
        absl::StrCat("ep*pp*dp = ", parallel.ep(), "*", parallel.pp(), "*",
                     parallel.dp(), " = ", FormatDouble(ranks),
                     " does not equal resources nodes*devices_per_node = ",
                     resources.nodes(), "*", resources.devices_per_node(),
                     " = ", devices));
  }
}

void SpecValidator::ValidateModel() {
  const v1::ModelSpec& model = spec_.model();
  const bool layers_usable =
      InRange("model.layers", model.layers(), 1, kMaxLayers);
  const bool d_model_usable =
      InRange("model.d_model", model.d_model(), kMinDModel, kMaxDModel);
  const bool heads_usable = AtLeast("model.heads", model.heads(), 1);
  if (heads_usable && d_model_usable) {
    if (model.d_model() % model.heads() != 0) {
      problems_.Add("model.heads",
                    absl::StrCat(model.heads(), " does not divide d_model ",
                                 model.d_model()));
    } else if (model.d_model() / model.heads() % 2 != 0) {
      problems_.Add(
          "model.heads",
          absl::StrCat("head_dim = d_model / heads = ", model.d_model(), " / ",
                       model.heads(), " = ", model.d_model() / model.heads(),
                       " is odd; rotary embedding needs an even head_dim"));
    }
  }
  bool kv_heads_usable = true;
  if (model.has_kv_heads()) {
    kv_heads_usable = AtLeast("model.kv_heads", model.kv_heads(), 1);
    if (kv_heads_usable && heads_usable &&
        model.heads() % model.kv_heads() != 0) {
      kv_heads_usable = false;
      problems_.Add("model.kv_heads",
                    absl::StrCat(model.kv_heads(), " does not divide heads ",
                                 model.heads(),
                                 " (each key and value head serves a whole "
                                 "group of query heads)"));
    }
  }
  const bool experts_usable =
      InRange("model.experts", model.experts(), 1, kMaxExperts);
  bool top_k_usable = false;
  if (experts_usable) {
    top_k_usable = InRange("model.top_k", model.top_k(), 1, model.experts(),
                           " (at most model.experts)");
  } else {
    AtLeast("model.top_k", model.top_k(), 1);
  }
  const bool ffn_hidden_usable =
      InRange("model.ffn_hidden", model.ffn_hidden(), 1, kMaxFfnHidden);
  const bool vocab_usable = InRange(
      "model.vocab", model.vocab(), 2, kMaxVocab,
      " (token ids are stored as uint16 up to vocab 65536, uint32 above)");
  seq_len_usable_ =
      InRange("model.seq_len", model.seq_len(), 2, kMaxSpecSeqLen);
  if (model.has_rope_theta() && Unreported("model.rope_theta") &&
      !(model.rope_theta() > 1 && model.rope_theta() <= kMaxRopeTheta)) {
    problems_.Add(
        "model.rope_theta",
        absl::StrCat(FormatDouble(model.rope_theta()), " is not in (1, ",
                     FormatDouble(kMaxRopeTheta), "]"));
  }
  if (model.has_rms_epsilon() && Unreported("model.rms_epsilon") &&
      !(model.rms_epsilon() > 0 && model.rms_epsilon() <= kMaxRmsEpsilon)) {
    problems_.Add(
        "model.rms_epsilon",
        absl::StrCat(FormatDouble(model.rms_epsilon()), " is not in (0, ",
                     FormatDouble(kMaxRmsEpsilon), "]"));
  }
  if (model.has_aux_loss_coefficient() &&
      Unreported("model.aux_loss_coefficient") &&
      !(model.aux_loss_coefficient() >= 0 &&
        model.aux_loss_coefficient() <= kMaxAuxLossCoefficient)) {
    problems_.Add(
        "model.aux_loss_coefficient",
        absl::StrCat(FormatDouble(model.aux_loss_coefficient()),
                     " is not in [0, ", FormatDouble(kMaxAuxLossCoefficient),
                     "] (0 turns the load-balancing loss off)"));
  }
  if (model.has_z_loss_coefficient() &&
      Unreported("model.z_loss_coefficient") &&
      !(model.z_loss_coefficient() >= 0 &&
        model.z_loss_coefficient() <= kMaxZLossCoefficient)) {
    problems_.Add(
        "model.z_loss_coefficient",
        absl::StrCat(FormatDouble(model.z_loss_coefficient()),
                     " is not in [0, ", FormatDouble(kMaxZLossCoefficient),
                     "] (0 turns the router z-loss off)"));
  }
  if (model.router() == v1::ROUTER_SCORE_SIGMOID &&
      model.z_loss_coefficient() > 0 &&
      Unreported("model.z_loss_coefficient")) {
    problems_.Add("model.z_loss_coefficient",
                  "applies to router: softmax only (the z-loss is of the "
                  "softmax's normaliser)");
  }
  const bool aux_loss_balancing =
      model.balancing() == v1::BALANCING_UNSPECIFIED ||
      model.balancing() == v1::BALANCING_AUX_LOSS;
  if (model.has_aux_loss_coefficient() && !aux_loss_balancing &&
      Unreported("model.aux_loss_coefficient")) {
    problems_.Add(
        "model.aux_loss_coefficient",
        absl::StrCat(
            "applies to balancing: aux_loss only, not "
            "balancing: ",
            model.balancing() == v1::BALANCING_BIAS ? "bias" : "none"));
  }
  if (model.has_bias_update_rate() && Unreported("model.bias_update_rate")) {
    if (model.balancing() != v1::BALANCING_BIAS) {
      problems_.Add("model.bias_update_rate",
                    "applies to balancing: bias only");
    } else if (!(model.bias_update_rate() > 0 &&
                 model.bias_update_rate() <= kMaxBiasUpdateRate)) {
      problems_.Add("model.bias_update_rate",
                    absl::StrCat(FormatDouble(model.bias_update_rate()),
                                 " is not in (0, ",
                                 FormatDouble(kMaxBiasUpdateRate), "]"));
    }
  }
  bool shared_experts_usable =
      InRange("model.shared_experts", model.shared_experts(), 0, kMaxExperts);
  if (model.has_shared_ffn_hidden() && Unreported("model.shared_ffn_hidden")) {
    if (model.shared_experts() <= 0) {
      problems_.Add("model.shared_ffn_hidden",
                    "applies only with model.shared_experts above 0");
    } else {
      shared_experts_usable &=
          InRange("model.shared_ffn_hidden", model.shared_ffn_hidden(), 1,
                  kMaxFfnHidden);
    }
  }
  if (shared_experts_usable && ffn_hidden_usable &&
      int64_t{model.shared_experts()} * SharedFfnHiddenOf(model) >
          kMaxFfnHidden) {
    shared_experts_usable = false;
    problems_.Add(
        "model.shared_experts",
        absl::StrCat(model.shared_experts(), " shared experts of hidden width ",
                     SharedFfnHiddenOf(model), " are ",
                     int64_t{model.shared_experts()} * SharedFfnHiddenOf(model),
                     " hidden units; at most ", kMaxFfnHidden,
                     " are allowed (they run as one SwiGLU that wide)"));
  }
  model_usable_ = layers_usable && d_model_usable && heads_usable &&
                  kv_heads_usable && top_k_usable && ffn_hidden_usable &&
                  shared_experts_usable && vocab_usable && seq_len_usable_;
  const v1::ParallelSpec& parallel = spec_.parallel();
  if (experts_usable && ep_usable_ && model.experts() % parallel.ep() != 0) {
    problems_.Add(
        "model.experts",
        absl::StrCat(model.experts(), " is not divisible by parallel.ep ",
                     parallel.ep(),
                     " (each expert-parallel rank holds "
                     "experts / ep experts)"));
  }
  if (layers_usable && pp_usable_ && model.layers() % parallel.pp() != 0) {
    problems_.Add(
        "model.layers",
        absl::StrCat(model.layers(), " is not divisible by parallel.pp ",
                     parallel.pp(),
                     " (each pipeline stage holds layers / pp "
                     "layers)"));
  }
}

void SpecValidator::ValidateSchedules() {
  // With auto, the planner chooses the fields left unset (an UNSPECIFIED
  // optimizer_offload); those set are checked as without it. Unset
  // dispatch_chunk_tokens, ring_dtp and sco read as their defaults.
  const v1::ScheduleSpec& schedules = spec_.schedules();
  InRange("schedules.dispatch_chunk_tokens", schedules.dispatch_chunk_tokens(),
          0, kMaxSpecBatchTokens, " (0 dispatches everything at once)");
  if (!schedules.auto_() ||
      schedules.optimizer_offload() != v1::OPTIMIZER_OFFLOAD_UNSPECIFIED) {
    KnownEnum("schedules.optimizer_offload", schedules.optimizer_offload(),
              *v1::OptimizerOffload_descriptor());
  }
  if (schedules.has_sco() && schedules.sco() &&
      !schedules.activation_checkpointing() && Unreported("schedules.sco") &&
      Unreported("schedules.activation_checkpointing")) {
    problems_.Add("schedules.activation_checkpointing",
                  "must be true when schedules.sco is true (SCO offloads the "
                  "checkpointed layer inputs)");
  }
}

void SpecValidator::ValidateGradientAccumulation() {
  // Unspecified is the default, fp32. bf16 gradients go with the product
  // weights stored in bf16, which only an offloaded optimizer's float32
  // masters allow.
  const v1::GradientAccumulation accumulation = spec_.gradient_accumulation();
  if (accumulation == v1::GRADIENT_ACCUMULATION_UNSPECIFIED) return;
  KnownEnum("gradient_accumulation", accumulation,
            *v1::GradientAccumulation_descriptor());
  if (accumulation != v1::GRADIENT_ACCUMULATION_BF16) return;
  if (spec_.precision() == v1::PRECISION_FP32 && Unreported("precision")) {
    problems_.Add("gradient_accumulation",
                  "bf16 needs precision: bf16 (it is fp32)");
  }
  const v1::OptimizerOffload offload = spec_.schedules().optimizer_offload();
  if (offload != v1::OPTIMIZER_OFFLOAD_SERIAL &&
      offload != v1::OPTIMIZER_OFFLOAD_STREAM &&
      Unreported("schedules.optimizer_offload")) {
    problems_.Add(
        "gradient_accumulation",
        absl::StrCat("bf16 needs schedules.optimizer_offload: serial or "
                     "stream (the optimizer's float32 masters on the host "
                     "take the bf16 gradients)",
                     spec_.schedules().auto_() &&
                             offload == v1::OPTIMIZER_OFFLOAD_UNSPECIFIED
                         ? "; schedules: auto may leave the optimizer on the "
                           "device, so set optimizer_offload beside it"
                         : ""));
  }
}

void SpecValidator::ValidateOptimizer() {
  const v1::OptimizerSpec& optimizer = spec_.optimizer();
  KnownEnum("optimizer.kind", optimizer.kind(),
            *v1::OptimizerKind_descriptor());
  if (Unreported("optimizer.lr") &&
      !(optimizer.lr() > 0 && optimizer.lr() <= kMaxLearningRate)) {
    problems_.Add("optimizer.lr",
                  absl::StrCat(FormatDouble(optimizer.lr()), " is not in (0, ",
                               FormatDouble(kMaxLearningRate), "]"));
  }
  NonNegative("optimizer.weight_decay", optimizer.weight_decay());
  if (Unreported("optimizer.betas")) {
    if (optimizer.betas_size() != 2) {
      problems_.Add("optimizer.betas",
                    absl::StrCat("expected exactly 2 values (beta1, beta2), "
                                 "got ",
                                 optimizer.betas_size()));
    } else {
      for (int i = 0; i < 2; ++i) {
        const double beta = optimizer.betas(i);
        if (!(beta >= 0 && beta < 1)) {
          problems_.Add(absl::StrCat("optimizer.betas[", i, "]"),
                        absl::StrCat(FormatDouble(beta), " is not in [0, 1)"));
        }
      }
    }
  }
  InRange("optimizer.warmup_steps", optimizer.warmup_steps(), 0, kMaxSteps);
  NonNegative("optimizer.grad_clip", optimizer.grad_clip(),
              " (0 disables clipping)");
  const std::string kind =
      EnumYamlName(*v1::OptimizerKind_descriptor(), optimizer.kind());
  if (kind.empty() || !Unreported("optimizer.kind") ||
      !Unreported("optimizer.expert_momentum")) {
    return;
  }
  if (optimizer.kind() == v1::OPTIMIZER_KIND_SKEWADAM) {
    KnownEnum("optimizer.expert_momentum", optimizer.expert_momentum(),
              *v1::ExpertMomentum_descriptor());
  } else if (optimizer.expert_momentum() != v1::EXPERT_MOMENTUM_UNSPECIFIED) {
    problems_.Add("optimizer.expert_momentum",
                  absl::StrCat("applies only to kind skewadam, not ", kind,
                               "; remove it"));
  }
}

void SpecValidator::ValidateData() {
  const v1::DataSpec& data = spec_.data();
  if (Unreported("data.path") && data.path().empty()) {
    problems_.Add("data.path", "required (a prepared shard directory)");
  } else {
    WithinPathLength("data.path", data.path());
  }
  const int64_t batch_tokens = data.batch_tokens();
  if (!InRange("data.batch_tokens", batch_tokens, 1, kMaxSpecBatchTokens) ||
      !seq_len_usable_) {
    return;
  }
  const int64_t seq_len = spec_.model().seq_len();
  if (batch_tokens < seq_len) {
    problems_.Add("data.batch_tokens",
                  absl::StrCat(batch_tokens, " is less than model.seq_len ",
                               seq_len, "; a batch holds whole sequences"));
  } else if (batch_tokens % seq_len != 0) {
    problems_.Add("data.batch_tokens", absl::StrCat(batch_tokens,
                                                    " is not a multiple of "
                                                    "model.seq_len ",
                                                    seq_len));
  } else if (ep_usable_ && dp_usable_ && spec_.train().micro_batches() >= 0 &&
             spec_.train().micro_batches() <= kMaxMicroBatches) {
    // Every micro-batch is split evenly over a stage's ep x dp ranks.
    const v1::ParallelSpec& parallel = spec_.parallel();
    const int64_t sequences = batch_tokens / seq_len;
    const int64_t parts =
        int64_t{MicroBatchesOf(spec_.train())} * parallel.ep() * parallel.dp();
    if (sequences % parts != 0) {
      problems_.Add(
          "data.batch_tokens",
          absl::StrCat(batch_tokens, " holds ", sequences,
                       " sequences, which do not divide evenly into "
                       "train.micro_batches ",
                       MicroBatchesOf(spec_.train()), " x parallel.ep ",
                       parallel.ep(), " x parallel.dp ", parallel.dp(), " = ",
                       parts, " parts"));
    } else {
      batch_usable_ = true;
    }
  }
}

void SpecValidator::ValidateTrain() {
  const v1::TrainSpec& train = spec_.train();
  InRange("train.steps", train.steps(), 1, kMaxSteps);
  InRange("train.checkpoint_every", train.checkpoint_every(), 0, kMaxSteps,
          " (0 means no periodic checkpoints)");
  InRange("train.eval_every", train.eval_every(), 0, kMaxSteps,
          " (0 means no eval)");
  micro_batches_usable_ = InRange("train.micro_batches", train.micro_batches(),
                                  0, kMaxMicroBatches, " (0 means 1)");
  InRange("train.max_restarts", train.max_restarts(), 0, kMaxRestarts);
  if (train.checkpoint_write() != v1::CHECKPOINT_WRITE_UNSPECIFIED) {
    KnownEnum("train.checkpoint_write", train.checkpoint_write(),
              *v1::CheckpointWrite_descriptor());
  }
  if (!train.has_time_limit() || !Unreported("train.time_limit")) return;
  const google::protobuf::Duration& limit = train.time_limit();
  if (limit.nanos() != 0) {
    problems_.Add("train.time_limit", "must be a whole number of seconds");
  } else if (limit.seconds() <= 0) {
    problems_.Add(
        "train.time_limit",
        absl::StrCat("must be longer than zero, got ", limit.seconds(), "s"));
  } else if (limit.seconds() > kMaxDurationSeconds) {
    problems_.Add("train.time_limit",
                  absl::StrCat("must be at most ",
                               FormatDurationSeconds(kMaxDurationSeconds)));
  }
}

void SpecValidator::ValidateSizes() {
  if (!(model_usable_ && batch_usable_ && micro_batches_usable_)) return;
  // In double: the products are what must be shown to fit.
  const v1::ModelSpec& model = spec_.model();
  const double d = model.d_model(), experts = model.experts(),
               f = model.ffn_hidden(), vocab = model.vocab();
  // wq and wo (d x d), wk and wv (kv_heads * head_dim x d), and QK-norm's
  // two scales of head_dim; the embedding and, untied, the lm_head.
  const double kv_width =
      model.has_kv_heads() ? d / model.heads() * model.kv_heads() : d;
  const double attention = 2 * d * d + 2 * kv_width * d +
                           (model.qk_norm() ? 2 * d / model.heads() : 0);
  const double shared_hidden =
      static_cast<double>(model.shared_experts()) * SharedFfnHiddenOf(model);
  const double parameters =
      model.layers() * (attention + experts * d + 3 * experts * d * f +
                        3 * shared_hidden * d + 2 * d) +
      (model.tie_embeddings() ? 1 : 2) * vocab * d + d;
  if (parameters > kMaxParameters) {
    problems_.Add("model",
                  absl::StrCat("has ", FormatDouble(parameters),
                               " parameters; at most 2^41 = ",
                               FormatDouble(kMaxParameters),
                               " are allowed (layers, d_model, experts, "
                               "ffn_hidden, shared experts and vocab make "
                               "them)"));
  }
  // A rank's share of one micro-batch, and the copies it routes.
  const v1::ParallelSpec& parallel = spec_.parallel();
  const int64_t tokens =
      spec_.data().batch_tokens() /
      (int64_t{MicroBatchesOf(spec_.train())} * parallel.ep() * parallel.dp());
  const double copies = static_cast<double>(tokens) * model.top_k();
  const double largest =
      std::max({copies * std::max(f, d), tokens * vocab, tokens * experts});
  if (largest > kMaxBufferElements) {
    problems_.Add(
        "data.batch_tokens",
        absl::StrCat(
            spec_.data().batch_tokens(), " gives each rank ", tokens,
            " tokens a micro-batch, whose largest buffer (tokens x top_k x "
            "max(ffn_hidden, d_model), tokens x vocab or tokens x experts) "
            "holds ",
            FormatDouble(largest),
            " elements; at most 2^40 are allowed: "
            "use more train.micro_batches or more ranks"));
  }
  const int64_t cap = spec_.schedules().dispatch_chunk_tokens();
  if (cap > 0 && Unreported("schedules.dispatch_chunk_tokens")) {
    const int64_t routed = tokens * model.top_k();
    const int64_t chunks = (routed + cap - 1) / cap;
    if (chunks > kMaxDispatchChunks) {
      problems_.Add(
          "schedules.dispatch_chunk_tokens",
          absl::StrCat(cap, " splits the ", routed,
                       " token copies a rank routes per micro-batch into up "
                       "to ",
                       chunks, " chunks; at most ", kMaxDispatchChunks,
                       " are allowed, so use at least ",
                       (routed + kMaxDispatchChunks - 1) / kMaxDispatchChunks));
    }
  }
}

}  // namespace

void ValidateSpec(const JobSpec& spec, Problems* problems) {
  SpecValidator(spec, problems).Validate();
  const int32_t min_nodes = spec.resources().min_nodes();
  if (min_nodes == 0 || problems->Covers("resources.nodes") ||
      problems->Covers("resources.min_nodes")) {
    return;
  }
  if (min_nodes < 0) {
    problems->Add("resources.min_nodes",
                  absl::StrCat(min_nodes,
                               " is negative; give the fewest nodes an "
                               "attempt may run on, 1..resources.nodes"));
    return;
  }
  if (min_nodes > spec.resources().nodes()) {
    problems->Add("resources.min_nodes",
                  absl::StrCat(min_nodes, " exceeds resources.nodes ",
                               spec.resources().nodes()));
    return;
  }
  if (!problems->empty() || !IsElastic(spec.resources())) return;
  // The fewest nodes must make a valid spec too: every rule that depends on
  // dp (the layout, the batch's split, the sizes a rank holds) is checked
  // again there.
  absl::StatusOr<JobSpec> smallest = SpecForNodes(spec, min_nodes);
  if (!smallest.ok()) {
    problems->Add("resources.min_nodes", smallest.status().message());
    return;
  }
  Problems at_min_nodes;
  SpecValidator(*smallest, &at_min_nodes).Validate();
  for (const std::string& line : at_min_nodes.lines()) {
    problems->Add("resources.min_nodes",
                  absl::StrCat("at ", min_nodes, " nodes (parallel.dp ",
                               smallest->parallel().dp(), "), ", line));
  }
}

}  // namespace job_spec_internal

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  job_spec_internal::Problems problems;
  job_spec_internal::ValidateSpec(spec, &problems);
  return problems.ToStatus();
}

absl::StatusOr<v1::JobSpec> SpecForNodes(const v1::JobSpec& spec,
                                         int32_t nodes) {
  v1::JobSpec attempt = spec;
  attempt.mutable_resources()->clear_min_nodes();
  if (nodes == spec.resources().nodes()) return attempt;
  if (nodes < 1 || nodes > spec.resources().nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(nodes, " nodes is outside 1..resources.nodes ",
                     spec.resources().nodes()));
  }
  const int64_t devices = int64_t{nodes} * spec.resources().devices_per_node();
  const int64_t model_ranks =
      int64_t{spec.parallel().ep()} * spec.parallel().pp();
  if (model_ranks < 1 || devices < 1 || devices % model_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        nodes, nodes == 1 ? " node" : " nodes", " x ",
        spec.resources().devices_per_node(), " devices = ", devices,
        " devices, not a multiple of parallel.ep x pp = ", model_ranks,
        " (dp takes the rest)"));
  }
  attempt.mutable_resources()->set_nodes(nodes);
  attempt.mutable_parallel()->set_dp(
      static_cast<int32_t>(devices / model_ranks));
  return attempt;
}

std::vector<int32_t> AttemptNodeCounts(const v1::JobSpec& spec) {
  std::vector<int32_t> counts = {spec.resources().nodes()};
  if (!IsElastic(spec.resources())) return counts;
  for (int32_t nodes = spec.resources().nodes() - 1;
       nodes >= spec.resources().min_nodes(); --nodes) {
    absl::StatusOr<v1::JobSpec> attempt = SpecForNodes(spec, nodes);
    if (attempt.ok() && ValidateJobSpec(*attempt).ok()) {
      counts.push_back(nodes);
    }
  }
  return counts;
}

bool IsElastic(const v1::Resources& resources) {
  return resources.min_nodes() >= 1 &&
         resources.min_nodes() < resources.nodes();
}

std::string NodesText(const v1::Resources& resources) {
  if (!IsElastic(resources)) return absl::StrCat(resources.nodes());
  return absl::StrCat(resources.min_nodes(), "-", resources.nodes());
}

int32_t MicroBatchesOf(const v1::TrainSpec& train) {
  return std::max(1, train.micro_batches());
}

}  // namespace plateau
