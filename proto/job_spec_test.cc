#include "proto/job_spec.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"

namespace plateau {
namespace {

using google::protobuf::util::MessageDifferencer;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

// Relative to the workspace root, the test's working directory under Bazel.
constexpr char kExampleSpecPath[] = "deploy/examples/tiny-moe.yaml";

// A valid spec as (path, YAML value) entries, in document order; tests
// override or remove entries and render it with Yaml().
class SpecText {
 public:
  SpecText() {
    entries_ = {
        {"name", "tiny-moe"},          {"model.layers", "4"},
        {"model.d_model", "256"},      {"model.heads", "8"},
        {"model.experts", "8"},        {"model.top_k", "2"},
        {"model.ffn_hidden", "512"},   {"model.vocab", "4096"},
        {"model.seq_len", "256"},      {"data.path", "data/brown"},
        {"data.batch_tokens", "2048"}, {"train.steps", "300"},
    };
  }

  // Sets `path` ("key" or "section.key") to the YAML text `value`.
  SpecText& Set(const std::string& path, const std::string& value) {
    for (auto& entry : entries_) {
      if (entry.first == path) {
        entry.second = value;
        return *this;
      }
    }
    entries_.emplace_back(path, value);
    return *this;
  }

  SpecText& Remove(const std::string& path) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == path) {
        entries_.erase(it);
        break;
      }
    }
    return *this;
  }

  // Block-style YAML, sections in order of first appearance.
  std::string Yaml() const {
    std::vector<std::string> sections;
    std::string top_level;
    for (const auto& [path, value] : entries_) {
      std::vector<std::string> parts = absl::StrSplit(path, '.');
      if (parts.size() == 1) {
        absl::StrAppend(&top_level, path, ": ", value, "\n");
      } else if (std::find(sections.begin(), sections.end(), parts[0]) ==
                 sections.end()) {
        sections.push_back(parts[0]);
      }
    }
    std::string yaml = top_level;
    for (const std::string& section : sections) {
      absl::StrAppend(&yaml, section, ":\n");
      for (const auto& [path, value] : entries_) {
        std::vector<std::string> parts = absl::StrSplit(path, '.');
        if (parts.size() == 2 && parts[0] == section) {
          absl::StrAppend(&yaml, "  ", parts[1], ": ", value, "\n");
        }
      }
    }
    return yaml;
  }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

// The problem lines of a failed parse.
std::vector<std::string> Problems(const absl::Status& status) {
  return absl::StrSplit(status.message(), '\n');
}

std::vector<std::string> ProblemsOf(const SpecText& text) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text.Yaml());
  EXPECT_FALSE(spec.ok()) << text.Yaml();
  if (spec.ok()) return {};
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return Problems(spec.status());
}

v1::JobSpec MustParse(const std::string& yaml) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status() << "\n" << yaml;
  return spec.ok() ? *spec : v1::JobSpec();
}

// JobSpecToYaml(spec) reads back as `spec` and renders the same again.
void ExpectRoundTrip(const v1::JobSpec& spec) {
  const std::string yaml = JobSpecToYaml(spec);
  const v1::JobSpec read_back = MustParse(yaml);
  std::string difference;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differencer.Compare(spec, read_back)) << difference << yaml;
  EXPECT_EQ(JobSpecToYaml(read_back), yaml);
}

// A complete, valid spec built in code, with nothing left at a default.
v1::JobSpec FullSpec() {
  v1::JobSpec spec;
  spec.set_name("big-moe-7");
  spec.set_priority(900);
  spec.mutable_resources()->set_nodes(2);
  spec.mutable_resources()->set_devices_per_node(4);
  v1::ModelSpec& model = *spec.mutable_model();
  model.set_layers(12);
  model.set_d_model(768);
  model.set_heads(12);
  model.set_experts(16);
  model.set_top_k(2);
  model.set_ffn_hidden(3072);
  model.set_vocab(50257);
  model.set_seq_len(1024);
  model.set_rope_theta(500000);
  model.set_rms_epsilon(1e-6);
  model.set_aux_loss_coefficient(0.001);
  model.set_kv_heads(4);
  model.set_z_loss_coefficient(0.001);
  model.set_qk_norm(true);
  model.set_shared_experts(2);
  model.set_shared_ffn_hidden(1536);
  spec.mutable_parallel()->set_ep(4);
  spec.mutable_parallel()->set_pp(2);
  spec.mutable_parallel()->set_dp(1);
  v1::ScheduleSpec& schedules = *spec.mutable_schedules();
  schedules.set_dispatch_chunk_tokens(1024);
  schedules.set_ring_dtp(true);
  schedules.set_sco(true);
  schedules.set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_STREAM);
  schedules.set_activation_checkpointing(true);
  v1::OptimizerSpec& optimizer = *spec.mutable_optimizer();
  optimizer.set_kind(v1::OPTIMIZER_KIND_SKEWADAM);
  optimizer.set_lr(1.0 / 3.0);
  optimizer.set_weight_decay(0.01);
  optimizer.add_betas(0.9);
  optimizer.add_betas(0.999);
  optimizer.set_warmup_steps(100);
  optimizer.set_grad_clip(0.5);
  optimizer.set_expert_momentum(v1::EXPERT_MOMENTUM_BF16);
  spec.mutable_data()->set_path("/srv/data/open web #1: \"text\"");
  spec.mutable_data()->set_batch_tokens(32768);
  v1::TrainSpec& train = *spec.mutable_train();
  train.set_steps(100000);
  train.set_checkpoint_every(1000);
  train.set_eval_every(500);
  train.set_seed(18446744073709551615u);
  train.set_max_restarts(7);
  train.mutable_time_limit()->set_seconds(5415);
  spec.set_init_from("/srv/models/Qwen3-30B-A3B");
  spec.set_gradient_accumulation(v1::GRADIENT_ACCUMULATION_FP32);
  return spec;
}

TEST(JobSpecTest, ExampleFileParses) {
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpecFile(kExampleSpecPath);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "tiny-moe");
  EXPECT_EQ(spec->priority(), 50);
  EXPECT_EQ(spec->resources().nodes(), 1);
  EXPECT_EQ(spec->resources().devices_per_node(), 2);
  EXPECT_EQ(spec->model().layers(), 4);
  EXPECT_EQ(spec->model().vocab(), 4096);
  EXPECT_EQ(spec->model().seq_len(), 256);
  EXPECT_EQ(spec->parallel().ep(), 2);
  EXPECT_EQ(spec->schedules().dispatch_chunk_tokens(), 1024);
  EXPECT_TRUE(spec->schedules().ring_dtp());
  EXPECT_TRUE(spec->schedules().sco());
  EXPECT_TRUE(spec->schedules().activation_checkpointing());
  EXPECT_EQ(spec->schedules().optimizer_offload(),
            v1::OPTIMIZER_OFFLOAD_STREAM);
  EXPECT_EQ(spec->precision(), v1::PRECISION_AUTO);
  EXPECT_EQ(spec->optimizer().kind(), v1::OPTIMIZER_KIND_SKEWADAM);
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 3.0e-3);
  EXPECT_THAT(spec->optimizer().betas(), ElementsAre(0.9, 0.95));
  EXPECT_EQ(spec->optimizer().warmup_steps(), 20);
  EXPECT_EQ(spec->optimizer().expert_momentum(), v1::EXPERT_MOMENTUM_NONE);
  EXPECT_EQ(spec->data().path(), "data/brown");
  EXPECT_EQ(spec->data().batch_tokens(), 2048);
  EXPECT_EQ(spec->train().steps(), 300);
  EXPECT_EQ(spec->train().checkpoint_every(), 100);
  EXPECT_EQ(spec->train().eval_every(), 50);
  EXPECT_EQ(spec->train().max_restarts(), 3);
  EXPECT_FALSE(spec->train().has_time_limit());
  EXPECT_TRUE(ValidateJobSpec(*spec).ok());
}

TEST(JobSpecTest, DefaultsAreApplied) {
  const v1::JobSpec spec = MustParse(SpecText().Yaml());
  EXPECT_EQ(spec.priority(), 50);
  EXPECT_EQ(spec.resources().nodes(), 1);
  EXPECT_EQ(spec.resources().devices_per_node(), 1);
  EXPECT_EQ(spec.parallel().ep(), 1);
  EXPECT_EQ(spec.parallel().pp(), 1);
  EXPECT_EQ(spec.parallel().dp(), 1);
  EXPECT_EQ(spec.schedules().dispatch_chunk_tokens(), 0);
  EXPECT_FALSE(spec.schedules().ring_dtp());
  EXPECT_FALSE(spec.schedules().sco());
  EXPECT_EQ(spec.schedules().optimizer_offload(), v1::OPTIMIZER_OFFLOAD_NONE);
  EXPECT_TRUE(spec.schedules().activation_checkpointing());
  EXPECT_EQ(spec.optimizer().kind(), v1::OPTIMIZER_KIND_ADAMW);
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 3e-4);
  EXPECT_DOUBLE_EQ(spec.optimizer().weight_decay(), 0.1);
  EXPECT_THAT(spec.optimizer().betas(), ElementsAre(0.9, 0.95));
  EXPECT_EQ(spec.optimizer().warmup_steps(), 0);
  EXPECT_DOUBLE_EQ(spec.optimizer().grad_clip(), 1.0);
  EXPECT_EQ(spec.optimizer().expert_momentum(),
            v1::EXPERT_MOMENTUM_UNSPECIFIED);
  EXPECT_EQ(spec.train().checkpoint_every(), 0);
  EXPECT_EQ(spec.train().eval_every(), 0);
  EXPECT_EQ(spec.train().seed(), 1u);
  EXPECT_EQ(spec.train().max_restarts(), 0);
  EXPECT_FALSE(spec.train().has_time_limit());
}

TEST(JobSpecTest, SkewAdamDefaultsExpertMomentumToNone) {
  const v1::JobSpec spec =
      MustParse(SpecText().Set("optimizer.kind", "skewadam").Yaml());
  EXPECT_EQ(spec.optimizer().expert_momentum(), v1::EXPERT_MOMENTUM_NONE);
  const v1::JobSpec bf16 =
      MustParse(SpecText()
                    .Set("optimizer.kind", "skewadam")
                    .Set("optimizer.expert_momentum", "bf16")
                    .Yaml());
  EXPECT_EQ(bf16.optimizer().expert_momentum(), v1::EXPERT_MOMENTUM_BF16);
}

// A checkpoint is written in the background unless the spec says
// blocking; any other word is refused, naming the choices.
TEST(JobSpecTest, CheckpointWriteIsBackgroundOrBlocking) {
  EXPECT_EQ(MustParse(SpecText().Yaml()).train().checkpoint_write(),
            v1::CHECKPOINT_WRITE_UNSPECIFIED);
  EXPECT_EQ(
      MustParse(SpecText().Set("train.checkpoint_write", "blocking").Yaml())
          .train()
          .checkpoint_write(),
      v1::CHECKPOINT_WRITE_BLOCKING);
  EXPECT_EQ(
      MustParse(SpecText().Set("train.checkpoint_write", "background").Yaml())
          .train()
          .checkpoint_write(),
      v1::CHECKPOINT_WRITE_BACKGROUND);
  v1::JobSpec spec = MustParse(SpecText().Yaml());
  spec.mutable_train()->set_checkpoint_write(
      static_cast<v1::CheckpointWrite>(7));
  const absl::Status status = ValidateJobSpec(spec);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("train.checkpoint_write: must be one of "
                                   "background|blocking"));
}

// bf16 gradient accumulation goes with bf16 products and an offloaded
// optimizer, whose float32 masters take the bf16 gradients.
TEST(JobSpecTest, Bf16GradientAccumulationNeedsBf16AndOptimizerOffload) {
  const v1::JobSpec spec =
      MustParse(SpecText()
                    .Set("gradient_accumulation", "bf16")
                    .Set("schedules.optimizer_offload", "serial")
                    .Yaml());
  EXPECT_EQ(spec.gradient_accumulation(), v1::GRADIENT_ACCUMULATION_BF16);
  EXPECT_EQ(MustParse(SpecText().Yaml()).gradient_accumulation(),
            v1::GRADIENT_ACCUMULATION_UNSPECIFIED);
  EXPECT_EQ(MustParse(SpecText().Set("gradient_accumulation", "fp32").Yaml())
                .gradient_accumulation(),
            v1::GRADIENT_ACCUMULATION_FP32);
  EXPECT_THAT(
      ProblemsOf(SpecText()
                     .Set("gradient_accumulation", "bf16")
                     .Set("precision", "fp32")
                     .Set("schedules.optimizer_offload", "none")),
      ::testing::UnorderedElementsAre(
          "gradient_accumulation: bf16 needs precision: bf16 (it is fp32)",
          "gradient_accumulation: bf16 needs schedules.optimizer_offload: "
          "serial or stream (the optimizer's float32 masters on the host take "
          "the bf16 gradients)"));
  // schedules: auto leaves the optimizer where it is cheapest: on the
  // device, unless pinned.
  EXPECT_THAT(
      ProblemsOf(SpecText()
                     .Set("gradient_accumulation", "bf16")
                     .Set("schedules.auto", "true")),
      ElementsAre("gradient_accumulation: bf16 needs "
                  "schedules.optimizer_offload: serial or stream (the "
                  "optimizer's float32 masters on the host take the bf16 "
                  "gradients); schedules: auto may leave the optimizer on the "
                  "device, so set optimizer_offload beside it"));
  EXPECT_THAT(
      ProblemsOf(SpecText()
                     .Set("gradient_accumulation", "bf16")
                     .Set("schedules.auto", "true")
                     .Set("schedules.optimizer_offload", "none")),
      ElementsAre("gradient_accumulation: bf16 needs "
                  "schedules.optimizer_offload: serial or stream (the "
                  "optimizer's float32 masters on the host take the bf16 "
                  "gradients)"));
  EXPECT_THAT(ProblemsOf(SpecText().Set("gradient_accumulation", "fp16")),
              ElementsAre("gradient_accumulation: expected one of fp32|bf16, "
                          "got 'fp16'"));
}

TEST(JobSpecTest, ExpertMomentumOnlyForSkewAdam) {
  EXPECT_THAT(ProblemsOf(SpecText().Set("optimizer.expert_momentum", "fp32")),
              ElementsAre("optimizer.expert_momentum: applies only to kind "
                          "skewadam, not adamw; remove it"));
  EXPECT_THAT(ProblemsOf(SpecText()
                             .Set("optimizer.kind", "lion")
                             .Set("optimizer.expert_momentum", "none")),
              ElementsAre("optimizer.expert_momentum: applies only to kind "
                          "skewadam, not lion; remove it"));
}

TEST(JobSpecTest, ReportsEveryProblem) {
  const std::string yaml = R"(
name: Tiny_MoE
priority: 5000
resources: {nodes: 1, devices_per_node: 2}
model: {layers: four, d_model: 256, heads: 7, experts: 8, top_k: 9,
        ffn_hidden: 512, vocab: 1, seq_len: 256, dropout: 0.1}
parallel: {ep: 3, pp: 1, dp: 1}
schedules: {sco: yes, sco_x: 1, optimizer_offload: Stream}
optimizer: {kind: sgd, lr: 0, betas: [0.9]}
data: {batch_tokens: 1000}
train: {steps: 0, time_limit: soon}
precision: fp16
)";
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Problems(spec.status()),
      UnorderedElementsAreArray({
          "name: 'Tiny_MoE' must start with a letter a-z",
          "priority: 5000 is not in 0..1000",
          "parallel: ep*pp*dp = 3*1*1 = 3 does not equal resources "
          "nodes*devices_per_node = 1*2 = 2",
          "model.layers: expected an integer, got 'four'",
          "model.heads: 7 does not divide d_model 256",
          "model.top_k: 9 is not in 1..8 (at most model.experts)",
          "model.vocab: 1 is not in 2..4194304 (token ids are stored as "
          "uint16 up to vocab 65536, uint32 above)",
          "model.dropout: unknown key; expected one of layers, d_model, "
          "heads, experts, top_k, ffn_hidden, vocab, seq_len, rope_theta, "
          "aux_loss_coefficient, kv_heads, z_loss_coefficient, qk_norm, "
          "balancing, bias_update_rate, router, shared_experts, "
          "shared_ffn_hidden, rms_epsilon, tie_embeddings",
          "model.experts: 8 is not divisible by parallel.ep 3 (each "
          "expert-parallel rank holds experts / ep experts)",
          "schedules.sco: expected true or false, got 'yes'",
          "schedules.sco_x: unknown key; expected one of "
          "dispatch_chunk_tokens, ring_dtp, sco, optimizer_offload, "
          "activation_checkpointing, auto",
          "schedules.optimizer_offload: expected one of none|serial|stream, "
          "got 'Stream'",
          "optimizer.kind: expected one of adamw|skewadam|adafactor|lion, "
          "got 'sgd'",
          "precision: expected one of bf16|fp32|auto, got 'fp16'",
          "optimizer.lr: 0 is not in (0, 10]",
          "optimizer.betas: expected exactly 2 values (beta1, beta2), got 1",
          "data.path: required",
          "data.batch_tokens: 1000 is not a multiple of model.seq_len 256",
          "train.steps: 0 is not in 1..1000000000",
          "train.time_limit: expected a duration like 30m, 2h, 90s or "
          "1h30m, got 'soon'",
      }));
}

TEST(JobSpecTest, MissingRequiredFields) {
  EXPECT_THAT(
      ProblemsOf(SpecText().Remove("name").Remove("model.seq_len")),
      UnorderedElementsAreArray({"name: required", "model.seq_len: required"}));
  EXPECT_THAT(ParseJobSpecYaml("name: x\n").status().message(),
              ::testing::AllOf(HasSubstr("model: required"),
                               HasSubstr("data: required"),
                               HasSubstr("train: required")));
  EXPECT_THAT(
      ProblemsOf(SpecText().Remove("train.steps").Set("train.seed", "7")),
      ElementsAre("train.steps: required"));
}

TEST(JobSpecTest, UnknownKeysAtEveryLevel) {
  EXPECT_THAT(ProblemsOf(SpecText().Set("owner", "ada")),
              ElementsAre(HasSubstr("owner: unknown key; expected one of name, "
                                    "priority, resources")));
  EXPECT_THAT(ProblemsOf(SpecText().Set("resources.gpus", "2")),
              ElementsAre("resources.gpus: unknown key; expected one of "
                          "nodes, devices_per_node, min_nodes"));
  EXPECT_THAT(ProblemsOf(SpecText().Set("train.time_limt", "30m")),
              ElementsAre(HasSubstr("train.time_limt: unknown key")));
  EXPECT_THAT(ProblemsOf(SpecText().Set("optimizer.beta1", "0.9")),
              ElementsAre(HasSubstr("optimizer.beta1: unknown key")));
}

TEST(JobSpecTest, WrongTypes) {
  struct Case {
    const char* path;
    const char* value;
    const char* problem;
  };
  const Case cases[] = {
      {"model.layers", "four", "model.layers: expected an integer, got 'four'"},
      {"model.layers", "2.5", "model.layers: expected an integer, got '2.5'"},
      {"model.layers", "4e2", "model.layers: expected an integer, got '4e2'"},
      {"model.layers", "'4'",
       "model.layers: expected an integer, got the quoted string '4'"},
      {"model.layers", "[4]", "model.layers: expected an integer, got a list"},
      {"model.layers", "", "model.layers: expected an integer, got no value"},
      {"model.layers", "3000000000",
       "model.layers: '3000000000' does not fit in an integer "
       "(-2147483648..2147483647)"},
      {"schedules.ring_dtp", "yes",
       "schedules.ring_dtp: expected true or false, got 'yes'"},
      {"schedules.ring_dtp", "1",
       "schedules.ring_dtp: expected true or false, got '1'"},
      {"schedules.ring_dtp", "\"true\"",
       "schedules.ring_dtp: expected true or false, got the quoted string "
       "'true'"},
      {"optimizer.lr", "fast", "optimizer.lr: expected a number, got 'fast'"},
      {"optimizer.lr", ".inf", "optimizer.lr: expected a number, got '.inf'"},
      {"optimizer.lr", "1e999", "optimizer.lr: '1e999' is too large"},
      {"optimizer.kind", "AdamW",
       "optimizer.kind: expected one of adamw|skewadam|adafactor|lion, got "
       "'AdamW'"},
      {"optimizer.betas", "0.9",
       "optimizer.betas: expected a list of numbers, got '0.9'"},
      {"optimizer.betas", "[0.9, high]",
       "optimizer.betas[1]: expected a number, got 'high'"},
      {"train.seed", "-1",
       "train.seed: expected a non-negative integer, got '-1'"},
      {"name", "{first: tiny}", "name: expected a string, got a mapping"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ProblemsOf(SpecText().Set(c.path, c.value)),
                ElementsAre(c.problem))
        << c.path << ": " << c.value;
  }
  EXPECT_THAT(Problems(ParseJobSpecYaml("name: x\nmodel: tiny\n"
                                        "data: {path: d, batch_tokens: 2048}\n"
                                        "train: {steps: 1}\n")
                           .status()),
              ElementsAre("model: expected a mapping, got 'tiny'"));
}

TEST(JobSpecTest, RepeatedKeyIsAnError) {
  const std::string yaml = SpecText().Yaml() + "priority: 1\npriority: 2\n";
  EXPECT_THAT(Problems(ParseJobSpecYaml(yaml).status()),
              ElementsAre("priority: given more than once"));
}

TEST(JobSpecTest, DocumentShapeProblems) {
  EXPECT_EQ(ParseJobSpecYaml("").status().message(),
            "spec: is empty; expected a mapping with at least name, model, "
            "data and train");
  EXPECT_EQ(ParseJobSpecYaml("# nothing\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJobSpecYaml("- name: x\n").status().message(),
            "spec: expected a mapping of fields (name: ..., model: ...), got "
            "a list");
  EXPECT_EQ(ParseJobSpecYaml("name: a\n---\nname: b\n").status().message(),
            "spec: expected one YAML document, found a second ('---' or "
            "'...' after the first)");
  EXPECT_EQ(
      ParseJobSpecYaml("name: a\n...\n# end\nname: b\n").status().message(),
      "spec: expected one YAML document, found a second ('---' or "
      "'...' after the first)");
  // Markers around a single document are fine.
  EXPECT_THAT(ParseJobSpecYaml("---\nname: a\n...\n").status().message(),
              ::testing::Not(::testing::HasSubstr("YAML document")));
}

TEST(JobSpecTest, SyntaxErrorNamesTheLine) {
  const std::string yaml = "name: tiny\nmodel: {layers: 4, d_model: 256\n";
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("spec: YAML syntax error at line 3, column 1: "));

  const std::string bad_indent = "name: tiny\nmodel: 1\n  layers: 4\n";
  EXPECT_THAT(ParseJobSpecYaml(bad_indent).status().message(),
              HasSubstr("at line 3"));
}

TEST(JobSpecTest, SchedulesNeedCheckpointingForSco) {
  EXPECT_THAT(
      ProblemsOf(SpecText()
                     .Set("schedules.sco", "true")
                     .Set("schedules.activation_checkpointing", "false")),
      ElementsAre("schedules.activation_checkpointing: must be true "
                  "when schedules.sco is true (SCO offloads the "
                  "checkpointed layer inputs)"));
  const v1::JobSpec spec = MustParse(
      SpecText().Set("schedules.activation_checkpointing", "false").Yaml());
  EXPECT_FALSE(spec.schedules().activation_checkpointing());
  MustParse(SpecText().Set("schedules.sco", "true").Yaml());
}

TEST(JobSpecTest, SchedulesAutoLeavesTheFourUnset) {
  for (const char* schedules : {"auto", "'auto'", "{auto: true}"}) {
    const v1::JobSpec spec =
        MustParse(SpecText().Set("schedules", schedules).Yaml());
    const v1::ScheduleSpec& parsed = spec.schedules();
    EXPECT_TRUE(parsed.auto_()) << schedules;
    EXPECT_FALSE(parsed.has_dispatch_chunk_tokens()) << schedules;
    EXPECT_FALSE(parsed.has_ring_dtp()) << schedules;
    EXPECT_FALSE(parsed.has_sco()) << schedules;
    EXPECT_EQ(parsed.optimizer_offload(), v1::OPTIMIZER_OFFLOAD_UNSPECIFIED)
        << schedules;
    EXPECT_TRUE(parsed.activation_checkpointing()) << schedules;
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  }
}

TEST(JobSpecTest, SchedulesAutoKeepsPinnedFields) {
  const v1::JobSpec spec = MustParse(
      SpecText()
          .Set("schedules",
               "{auto: true, ring_dtp: true, sco: false, "
               "optimizer_offload: serial, activation_checkpointing: false}")
          .Yaml());
  const v1::ScheduleSpec& schedules = spec.schedules();
  EXPECT_TRUE(schedules.auto_());
  EXPECT_FALSE(schedules.has_dispatch_chunk_tokens());
  ASSERT_TRUE(schedules.has_ring_dtp());
  EXPECT_TRUE(schedules.ring_dtp());
  ASSERT_TRUE(schedules.has_sco());
  EXPECT_FALSE(schedules.sco());
  EXPECT_EQ(schedules.optimizer_offload(), v1::OPTIMIZER_OFFLOAD_SERIAL);
  EXPECT_FALSE(schedules.activation_checkpointing());

  // Pinned fields are checked as without auto.
  EXPECT_THAT(ProblemsOf(SpecText().Set(
                  "schedules", "{auto: true, dispatch_chunk_tokens: -1}")),
              ElementsAre("schedules.dispatch_chunk_tokens: -1 is not in "
                          "0..1073741824 (0 dispatches everything at once)"));
  EXPECT_THAT(ProblemsOf(SpecText().Set(
                  "schedules",
                  "{auto: true, sco: true, activation_checkpointing: false}")),
              ElementsAre("schedules.activation_checkpointing: must be true "
                          "when schedules.sco is true (SCO offloads the "
                          "checkpointed layer inputs)"));
  EXPECT_THAT(ProblemsOf(SpecText().Set("schedules", "{auto: yes}")),
              ElementsAre("schedules.auto: expected true or false, got 'yes'"));
}

TEST(JobSpecTest, SchedulesScalarOtherThanAutoIsAnError) {
  const std::pair<const char*, const char*> cases[] = {
      {"fast", "'fast'"},   {"true", "'true'"}, {"Auto", "'Auto'"},
      {"[auto]", "a list"}, {"", "no value"},
  };
  for (const auto& [value, described] : cases) {
    EXPECT_THAT(ProblemsOf(SpecText().Set("schedules", value)),
                ElementsAre(absl::StrCat(
                    "schedules: expected a mapping or auto, got ", described)))
        << value;
  }
}

TEST(JobSpecTest, SchedulesWithoutAutoGetTheDefaults) {
  for (const char* schedules : {"{auto: false}", "{ring_dtp: false}"}) {
    const v1::JobSpec spec =
        MustParse(SpecText().Set("schedules", schedules).Yaml());
    const v1::ScheduleSpec& parsed = spec.schedules();
    EXPECT_FALSE(parsed.auto_()) << schedules;
    EXPECT_EQ(parsed.dispatch_chunk_tokens(), 0) << schedules;
    EXPECT_FALSE(parsed.ring_dtp()) << schedules;
    EXPECT_FALSE(parsed.sco()) << schedules;
    EXPECT_EQ(parsed.optimizer_offload(), v1::OPTIMIZER_OFFLOAD_NONE)
        << schedules;
    EXPECT_TRUE(parsed.activation_checkpointing()) << schedules;
  }
  // The absent optional fields stay unset; their values are the defaults.
  const v1::JobSpec spec = MustParse(SpecText().Yaml());
  EXPECT_FALSE(spec.schedules().has_dispatch_chunk_tokens());
  EXPECT_FALSE(spec.schedules().has_sco());
}

TEST(JobSpecTest, ValidateJobSpecWithAuto) {
  v1::JobSpec spec = FullSpec();
  v1::ScheduleSpec& schedules = *spec.mutable_schedules();
  schedules.clear_dispatch_chunk_tokens();
  schedules.clear_ring_dtp();
  schedules.clear_sco();
  schedules.clear_optimizer_offload();
  schedules.set_activation_checkpointing(false);
  EXPECT_THAT(Problems(ValidateJobSpec(spec)),
              ElementsAre("schedules.optimizer_offload: must be one of "
                          "none|serial|stream"));
  schedules.set_auto_(true);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  schedules.set_optimizer_offload(static_cast<v1::OptimizerOffload>(9));
  EXPECT_THAT(Problems(ValidateJobSpec(spec)),
              ElementsAre("schedules.optimizer_offload: must be one of "
                          "none|serial|stream"));
  schedules.set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_STREAM);
  schedules.set_sco(true);
  EXPECT_THAT(Problems(ValidateJobSpec(spec)),
              ElementsAre("schedules.activation_checkpointing: must be true "
                          "when schedules.sco is true (SCO offloads the "
                          "checkpointed layer inputs)"));
}

TEST(JobSpecTest, RenderRoundTripsSchedulesPresence) {
  v1::JobSpec unpinned = FullSpec();
  v1::ScheduleSpec& unpinned_schedules = *unpinned.mutable_schedules();
  unpinned_schedules.set_auto_(true);
  unpinned_schedules.clear_dispatch_chunk_tokens();
  unpinned_schedules.clear_ring_dtp();
  unpinned_schedules.clear_sco();
  unpinned_schedules.clear_optimizer_offload();
  v1::JobSpec pinned_false = unpinned;
  pinned_false.mutable_schedules()->set_dispatch_chunk_tokens(0);
  pinned_false.mutable_schedules()->set_ring_dtp(false);
  pinned_false.mutable_schedules()->set_sco(false);
  pinned_false.mutable_schedules()->set_optimizer_offload(
      v1::OPTIMIZER_OFFLOAD_NONE);
  // Chosen by the planner: all four set, auto kept.
  v1::JobSpec planned = FullSpec();
  planned.mutable_schedules()->set_auto_(true);
  // Without auto, optional fields left unset in code stay unset.
  v1::JobSpec unset_without_auto = FullSpec();
  unset_without_auto.mutable_schedules()->clear_dispatch_chunk_tokens();
  unset_without_auto.mutable_schedules()->clear_ring_dtp();
  unset_without_auto.mutable_schedules()->clear_sco();
  const v1::JobSpec parsed_auto =
      MustParse(SpecText().Set("schedules", "auto").Yaml());
  for (const v1::JobSpec& spec :
       {unpinned, pinned_false, planned, unset_without_auto, parsed_auto}) {
    ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    ExpectRoundTrip(spec);
    // Presence of the optional fields included.
    EXPECT_EQ(MustParse(JobSpecToYaml(spec)).SerializeAsString(),
              spec.SerializeAsString());
  }
  EXPECT_THAT(JobSpecToYaml(unpinned),
              HasSubstr("\nschedules:\n  activation_checkpointing: true\n"
                        "  auto: true\noptimizer:\n"));
  EXPECT_THAT(JobSpecToYaml(FullSpec()), ::testing::Not(HasSubstr("auto")));
}

TEST(JobSpecTest, TimeLimitParsing) {
  const std::pair<const char*, int64_t> valid[] = {
      {"30m", 1800},      {"2h", 7200},    {"90s", 90}, {"1h30m", 5400},
      {"1h30m15s", 5415}, {"'45m'", 2700}, {"1s", 1},
  };
  for (const auto& [text, seconds] : valid) {
    const v1::JobSpec spec =
        MustParse(SpecText().Set("train.time_limit", text).Yaml());
    EXPECT_TRUE(spec.train().has_time_limit()) << text;
    EXPECT_EQ(spec.train().time_limit().seconds(), seconds) << text;
    EXPECT_EQ(spec.train().time_limit().nanos(), 0) << text;
  }
  for (const char* text :
       {"30", "1.5h", "30m1h", "1h1h", "-5m", "soon", "m", "1d", "[30m]"}) {
    EXPECT_THAT(ProblemsOf(SpecText().Set("train.time_limit", text)),
                ElementsAre(HasSubstr("train.time_limit: expected a duration "
                                      "like 30m, 2h, 90s or 1h30m, got ")))
        << text;
  }
  EXPECT_THAT(ProblemsOf(SpecText().Set("train.time_limit", "0s")),
              ElementsAre("train.time_limit: must be longer than zero, got "
                          "0s"));
  EXPECT_THAT(
      ProblemsOf(SpecText().Set("train.time_limit", "99999999999999999999h")),
      ElementsAre("train.time_limit: must be at most 87660000h"));
}

TEST(JobSpecTest, RenderRoundTripsExactly) {
  absl::StatusOr<v1::JobSpec> example = ReadJobSpecFile(kExampleSpecPath);
  ASSERT_TRUE(example.ok()) << example.status();
  const v1::JobSpec full = FullSpec();
  ASSERT_TRUE(ValidateJobSpec(full).ok()) << ValidateJobSpec(full);
  v1::JobSpec odd_doubles = full;
  odd_doubles.mutable_optimizer()->set_lr(1e-7);
  odd_doubles.mutable_optimizer()->set_weight_decay(1234.5);
  odd_doubles.mutable_optimizer()->set_grad_clip(0);
  odd_doubles.mutable_optimizer()->set_betas(0, 0.1 + 0.2);
  odd_doubles.set_name("a");
  odd_doubles.mutable_data()->set_path("null");
  odd_doubles.mutable_train()->clear_time_limit();
  v1::JobSpec tied = *example;
  tied.mutable_model()->set_tie_embeddings(true);
  for (const v1::JobSpec& spec : {*example, full, odd_doubles, tied}) {
    ExpectRoundTrip(spec);
  }
}

TEST(JobSpecTest, RenderLooksLikeTheDocumentedSpec) {
  const std::string yaml = JobSpecToYaml(FullSpec());
  EXPECT_THAT(yaml, HasSubstr("name: big-moe-7\npriority: 900\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  optimizer_offload: stream\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  kind: skewadam\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  betas: [0.9, 0.999]\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  expert_momentum: bf16\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  time_limit: 1h30m15s\n"));
  EXPECT_THAT(yaml, HasSubstr("\ninit_from: /srv/models/Qwen3-30B-A3B\n"));
  EXPECT_THAT(yaml, HasSubstr("\ngradient_accumulation: fp32\n"));
  EXPECT_THAT(yaml,
              HasSubstr("\n  path: \"/srv/data/open web #1: \\\"text\\\"\"\n"));
}

TEST(JobSpecTest, ValidateJobSpecBuiltInCode) {
  EXPECT_TRUE(ValidateJobSpec(FullSpec()).ok());

  v1::JobSpec spec = FullSpec();
  spec.mutable_resources()->set_nodes(0);
  spec.mutable_schedules()->set_activation_checkpointing(false);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_KIND_ADAMW);
  spec.mutable_optimizer()->set_betas(1, 1.0);
  spec.mutable_data()->clear_path();
  spec.mutable_train()->mutable_time_limit()->set_nanos(500000000);
  const absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Problems(status),
      ElementsAre(
          "resources.nodes: 0 is not in 1..1024",
          "schedules.activation_checkpointing: must be true when "
          "schedules.sco is true (SCO offloads the checkpointed layer inputs)",
          "optimizer.betas[1]: 1 is not in [0, 1)",
          "optimizer.expert_momentum: applies only to kind skewadam, not "
          "adamw; remove it",
          "data.path: required (a prepared shard directory)",
          "train.time_limit: must be a whole number of seconds"));

  // An empty proto: every unset field that has no valid zero is reported.
  EXPECT_THAT(Problems(ValidateJobSpec(v1::JobSpec())),
              ::testing::IsSupersetOf(
                  {"name: required", "resources.nodes: 0 is not in 1..1024",
                   "schedules.optimizer_offload: must be one of "
                   "none|serial|stream",
                   "optimizer.kind: must be one of "
                   "adamw|skewadam|adafactor|lion",
                   "optimizer.betas: expected exactly 2 values (beta1, "
                   "beta2), got 0",
                   "train.steps: 0 is not in 1..1000000000"}));

  v1::JobSpec no_momentum = FullSpec();
  no_momentum.mutable_optimizer()->clear_expert_momentum();
  EXPECT_THAT(Problems(ValidateJobSpec(no_momentum)),
              ElementsAre("optimizer.expert_momentum: must be one of "
                          "none|bf16|fp32"));
}

TEST(JobSpecTest, ReadJobSpecFileErrorsNameThePath) {
  absl::StatusOr<v1::JobSpec> missing =
      ReadJobSpecFile("deploy/examples/no-such-spec.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("deploy/examples/no-such-spec.yaml"));

  absl::StatusOr<v1::JobSpec> directory = ReadJobSpecFile("deploy/examples");
  EXPECT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("deploy/examples"));

  const std::string path = absl::StrCat(::testing::TempDir(), "/bad-spec.yaml");
  std::FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  const std::string yaml = SpecText().Set("priority", "-1").Yaml() + "x: 1\n";
  std::fwrite(yaml.data(), 1, yaml.size(), file);
  std::fclose(file);
  absl::StatusOr<v1::JobSpec> bad = ReadJobSpecFile(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Problems(bad.status()),
      ElementsAre(HasSubstr(absl::StrCat(path, ": x: unknown key")),
                  absl::StrCat(path, ": priority: -1 is not in 0..1000")));
}

// One numeric rule at its boundary: `valid` parses, `invalid` gives exactly
// `problem`.
struct BoundaryCase {
  std::string label;
  std::vector<std::pair<std::string, std::string>> valid;
  std::vector<std::pair<std::string, std::string>> invalid;
  std::string problem;
};

class JobSpecBoundaryTest : public ::testing::TestWithParam<BoundaryCase> {};

SpecText WithOverrides(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  SpecText text;
  for (const auto& [path, value] : overrides) text.Set(path, value);
  return text;
}

TEST_P(JobSpecBoundaryTest, ValidAtTheEdgeInvalidPastIt) {
  const BoundaryCase& c = GetParam();
  MustParse(WithOverrides(c.valid).Yaml());
  EXPECT_THAT(ProblemsOf(WithOverrides(c.invalid)), ElementsAre(c.problem));
}

const BoundaryCase kBoundaryCases[] = {
    {"NameLongest",
     {{"name", std::string(63, 'a')}},
     {{"name", std::string(64, 'a')}},
     "name: '" + std::string(40, 'a') +
         "...' is 64 characters long; at most 63 are allowed"},
    {"NameShortest", {{"name", "a"}}, {{"name", "''"}}, "name: required"},
    {"NameStart",
     {{"name", "a1-b"}},
     {{"name", "1ab"}},
     "name: '1ab' must start with a letter a-z"},
    {"NameCharacters",
     {{"name", "tiny-moe-2"}},
     {{"name", "tiny.moe"}},
     "name: 'tiny.moe' may contain only a-z, 0-9 and '-'"},
    {"PriorityLow",
     {{"priority", "0"}},
     {{"priority", "-1"}},
     "priority: -1 is not in 0..1000"},
    {"PriorityHigh",
     {{"priority", "1000"}},
     {{"priority", "1001"}},
     "priority: 1001 is not in 0..1000"},
    {"NodesLow",
     {{"resources.nodes", "1"}},
     {{"resources.nodes", "0"}},
     "resources.nodes: 0 is not in 1..1024"},
    {"NodesHigh",
     {{"resources.nodes", "1024"},
      {"parallel.dp", "1024"},
      {"data.batch_tokens", "262144"}},
     {{"resources.nodes", "1025"}},
     "resources.nodes: 1025 is not in 1..1024"},
    {"DevicesPerNodeLow",
     {{"resources.devices_per_node", "1"}},
     {{"resources.devices_per_node", "0"}},
     "resources.devices_per_node: 0 is not in 1..64"},
    {"DevicesPerNodeHigh",
     {{"resources.devices_per_node", "64"},
      {"parallel.dp", "64"},
      {"data.batch_tokens", "16384"}},
     {{"resources.devices_per_node", "65"}},
     "resources.devices_per_node: 65 is not in 1..64"},
    {"ExpertParallel",
     {{"parallel.ep", "8"}, {"resources.devices_per_node", "8"}},
     {{"parallel.ep", "0"}},
     "parallel.ep: 0 must be at least 1"},
    {"PipelineParallel",
     {{"parallel.pp", "4"}, {"resources.devices_per_node", "4"}},
     {{"parallel.pp", "0"}},
     "parallel.pp: 0 must be at least 1"},
    {"DataParallel",
     {{"parallel.dp", "2"}, {"resources.nodes", "2"}},
     {{"parallel.dp", "-1"}},
     "parallel.dp: -1 must be at least 1"},
    {"ParallelProduct",
     {{"parallel.ep", "2"},
      {"parallel.pp", "2"},
      {"parallel.dp", "2"},
      {"resources.nodes", "2"},
      {"resources.devices_per_node", "4"}},
     {{"parallel.ep", "2"},
      {"parallel.dp", "2"},
      {"resources.devices_per_node", "2"}},
     "parallel: ep*pp*dp = 2*1*2 = 4 does not equal resources "
     "nodes*devices_per_node = 1*2 = 2"},
    {"LayersLow",
     {{"model.layers", "1"}},
     {{"model.layers", "0"}},
     "model.layers: 0 is not in 1..1024"},
    {"LayersHigh",
     {{"model.layers", "1024"}},
     {{"model.layers", "1025"}},
     "model.layers: 1025 is not in 1..1024"},
    {"DModelLow",
     {{"model.d_model", "8"}, {"model.heads", "4"}},
     {{"model.d_model", "7"}, {"model.heads", "1"}},
     "model.d_model: 7 is not in 8..65536"},
    {"DModelHigh",
     {{"model.d_model", "65536"}},
     {{"model.d_model", "65537"}},
     "model.d_model: 65537 is not in 8..65536"},
    {"HeadsDivide",
     {{"model.heads", "16"}},
     {{"model.heads", "7"}},
     "model.heads: 7 does not divide d_model 256"},
    {"HeadDimEven",
     {{"model.heads", "128"}},
     {{"model.heads", "256"}},
     "model.heads: head_dim = d_model / heads = 256 / 256 = 1 is odd; rotary "
     "embedding needs an even head_dim"},
    {"HeadsLow",
     {{"model.heads", "1"}},
     {{"model.heads", "0"}},
     "model.heads: 0 must be at least 1"},
    {"KvHeadsLow",
     {{"model.kv_heads", "1"}},
     {{"model.kv_heads", "0"}},
     "model.kv_heads: 0 must be at least 1"},
    {"KvHeadsDivide",
     {{"model.kv_heads", "2"}},
     {{"model.kv_heads", "3"}},
     "model.kv_heads: 3 does not divide heads 8 (each key and value head "
     "serves a whole group of query heads)"},
    {"KvHeadsHigh",
     {{"model.kv_heads", "8"}},
     {{"model.kv_heads", "16"}},
     "model.kv_heads: 16 does not divide heads 8 (each key and value head "
     "serves a whole group of query heads)"},
    {"ExpertsLow",
     {{"model.experts", "1"}, {"model.top_k", "1"}},
     {{"model.experts", "0"}},
     "model.experts: 0 is not in 1..4096"},
    {"ExpertsHigh",
     {{"model.experts", "4096"}},
     {{"model.experts", "4097"}},
     "model.experts: 4097 is not in 1..4096"},
    {"TopKHigh",
     {{"model.top_k", "8"}},
     {{"model.top_k", "9"}},
     "model.top_k: 9 is not in 1..8 (at most model.experts)"},
    {"TopKLow",
     {{"model.top_k", "1"}},
     {{"model.top_k", "0"}},
     "model.top_k: 0 is not in 1..8 (at most model.experts)"},
    {"FfnHiddenLow",
     {{"model.ffn_hidden", "1"}},
     {{"model.ffn_hidden", "0"}},
     "model.ffn_hidden: 0 is not in 1..1048576"},
    {"FfnHiddenHigh",
     {{"model.ffn_hidden", "1048576"}},
     {{"model.ffn_hidden", "1048577"}},
     "model.ffn_hidden: 1048577 is not in 1..1048576"},
    {"VocabLow",
     {{"model.vocab", "2"}},
     {{"model.vocab", "1"}},
     "model.vocab: 1 is not in 2..4194304 (token ids are stored as uint16 up "
     "to vocab 65536, uint32 above)"},
    {"VocabHigh",
     {{"model.vocab", "4194304"}},
     {{"model.vocab", "4194305"}},
     "model.vocab: 4194305 is not in 2..4194304 (token ids are stored as "
     "uint16 up to vocab 65536, uint32 above)"},
    {"SeqLenLow",
     {{"model.seq_len", "2"}},
     {{"model.seq_len", "1"}},
     "model.seq_len: 1 is not in 2..1048576"},
    {"SeqLenHigh",
     {{"model.seq_len", "1048576"}, {"data.batch_tokens", "1048576"}},
     {{"model.seq_len", "1048577"}},
     "model.seq_len: 1048577 is not in 2..1048576"},
    {"RopeThetaLow",
     {{"model.rope_theta", "1.5"}},
     {{"model.rope_theta", "1"}},
     "model.rope_theta: 1 is not in (1, 1000000000]"},
    {"RopeThetaHigh",
     {{"model.rope_theta", "1e9"}},
     {{"model.rope_theta", "2e9"}},
     "model.rope_theta: 2000000000 is not in (1, 1000000000]"},
    {"AuxLossCoefficientLow",
     {{"model.aux_loss_coefficient", "0"}},
     {{"model.aux_loss_coefficient", "-0.01"}},
     "model.aux_loss_coefficient: -0.01 is not in [0, 1] (0 turns the "
     "load-balancing loss off)"},
    {"AuxLossCoefficientHigh",
     {{"model.aux_loss_coefficient", "1"}},
     {{"model.aux_loss_coefficient", "1.5"}},
     "model.aux_loss_coefficient: 1.5 is not in [0, 1] (0 turns the "
     "load-balancing loss off)"},
    {"ZLossCoefficientLow",
     {{"model.z_loss_coefficient", "0"}},
     {{"model.z_loss_coefficient", "-0.001"}},
     "model.z_loss_coefficient: -0.001 is not in [0, 1] (0 turns the router "
     "z-loss off)"},
    {"BiasUpdateRateLow",
     {{"model.balancing", "bias"}, {"model.bias_update_rate", "0.001"}},
     {{"model.balancing", "bias"}, {"model.bias_update_rate", "0"}},
     "model.bias_update_rate: 0 is not in (0, 1]"},
    {"BiasUpdateRateHigh",
     {{"model.balancing", "bias"}, {"model.bias_update_rate", "1"}},
     {{"model.balancing", "bias"}, {"model.bias_update_rate", "1.5"}},
     "model.bias_update_rate: 1.5 is not in (0, 1]"},
    {"BiasUpdateRateOnlyWithBias",
     {{"model.balancing", "bias"}, {"model.bias_update_rate", "0.01"}},
     {{"model.balancing", "aux_loss"}, {"model.bias_update_rate", "0.01"}},
     "model.bias_update_rate: applies to balancing: bias only"},
    {"AuxLossCoefficientOnlyWithAuxLoss",
     {{"model.balancing", "aux_loss"}, {"model.aux_loss_coefficient", "0.02"}},
     {{"model.balancing", "none"}, {"model.aux_loss_coefficient", "0.02"}},
     "model.aux_loss_coefficient: applies to balancing: aux_loss only, not "
     "balancing: none"},
    {"ZLossOnlyWithSoftmaxRouter",
     {{"model.router", "softmax"}, {"model.z_loss_coefficient", "0.001"}},
     {{"model.router", "sigmoid"}, {"model.z_loss_coefficient", "0.001"}},
     "model.z_loss_coefficient: applies to router: softmax only (the z-loss "
     "is of the softmax's normaliser)"},
    {"ZLossCoefficientHigh",
     {{"model.z_loss_coefficient", "1"}},
     {{"model.z_loss_coefficient", "2"}},
     "model.z_loss_coefficient: 2 is not in [0, 1] (0 turns the router "
     "z-loss off)"},
    {"SharedExpertsLow",
     {{"model.shared_experts", "0"}},
     {{"model.shared_experts", "-1"}},
     "model.shared_experts: -1 is not in 0..4096"},
    {"SharedFfnHiddenLow",
     {{"model.shared_experts", "1"}, {"model.shared_ffn_hidden", "1"}},
     {{"model.shared_experts", "1"}, {"model.shared_ffn_hidden", "0"}},
     "model.shared_ffn_hidden: 0 is not in 1..1048576"},
    {"SharedFfnHiddenOnlyWithSharedExperts",
     {{"model.shared_experts", "2"}, {"model.shared_ffn_hidden", "64"}},
     {{"model.shared_experts", "0"}, {"model.shared_ffn_hidden", "64"}},
     "model.shared_ffn_hidden: applies only with model.shared_experts above "
     "0"},
    {"SharedHiddenUnitsHigh",
     {{"model.shared_experts", "4"}, {"model.shared_ffn_hidden", "262144"}},
     {{"model.shared_experts", "5"}, {"model.shared_ffn_hidden", "262144"}},
     "model.shared_experts: 5 shared experts of hidden width 262144 are "
     "1310720 hidden units; at most 1048576 are allowed (they run as one "
     "SwiGLU that wide)"},
    {"ExpertsDivisibleByEp",
     {{"parallel.ep", "2"}, {"resources.devices_per_node", "2"}},
     {{"parallel.ep", "3"},
      {"resources.devices_per_node", "3"},
      {"data.batch_tokens", "6144"}},
     "model.experts: 8 is not divisible by parallel.ep 3 (each "
     "expert-parallel rank holds experts / ep experts)"},
    {"LayersDivisibleByPp",
     {{"parallel.pp", "2"}, {"resources.devices_per_node", "2"}},
     {{"parallel.pp", "3"}, {"resources.devices_per_node", "3"}},
     "model.layers: 4 is not divisible by parallel.pp 3 (each pipeline stage "
     "holds layers / pp layers)"},
    {"BatchTokensAtLeastSeqLen",
     {{"data.batch_tokens", "256"}},
     {{"data.batch_tokens", "255"}},
     "data.batch_tokens: 255 is less than model.seq_len 256; a batch holds "
     "whole sequences"},
    {"BatchTokensMultipleOfSeqLen",
     {{"data.batch_tokens", "512"}},
     {{"data.batch_tokens", "513"}},
     "data.batch_tokens: 513 is not a multiple of model.seq_len 256"},
    {"SequencesDivisibleByDp",
     {{"parallel.dp", "8"}, {"resources.devices_per_node", "8"}},
     {{"parallel.dp", "3"}, {"resources.devices_per_node", "3"}},
     "data.batch_tokens: 2048 holds 8 sequences, which do not divide evenly "
     "into train.micro_batches 1 x parallel.ep 1 x parallel.dp 3 = 3 parts"},
    {"SequencesDivisibleByMicroBatchesAndEp",
     {{"train.micro_batches", "2"},
      {"parallel.ep", "4"},
      {"resources.devices_per_node", "4"}},
     {{"train.micro_batches", "4"},
      {"parallel.ep", "4"},
      {"resources.devices_per_node", "4"}},
     "data.batch_tokens: 2048 holds 8 sequences, which do not divide evenly "
     "into train.micro_batches 4 x parallel.ep 4 x parallel.dp 1 = 16 parts"},
    {"MicroBatches",
     {{"train.micro_batches", "0"}},
     {{"train.micro_batches", "-1"}},
     "train.micro_batches: -1 is not in 0..4096 (0 means 1)"},
    {"MicroBatchesHigh",
     {{"train.micro_batches", "4096"}, {"data.batch_tokens", "1048576"}},
     {{"train.micro_batches", "4097"}, {"data.batch_tokens", "1048576"}},
     "train.micro_batches: 4097 is not in 0..4096 (0 means 1)"},
    {"BatchTokensHigh",
     {{"data.batch_tokens", "1073741824"}, {"train.micro_batches", "64"}},
     {{"data.batch_tokens", "1073742080"}, {"train.micro_batches", "64"}},
     "data.batch_tokens: 1073742080 is not in 1..1073741824"},
    {"LargestBuffer",
     {{"model.vocab", "4194304"}, {"data.batch_tokens", "262144"}},
     {{"model.vocab", "4194304"}, {"data.batch_tokens", "262400"}},
     "data.batch_tokens: 262400 gives each rank 262400 tokens a "
     "micro-batch, whose largest buffer (tokens x top_k x max(ffn_hidden, "
     "d_model), tokens x vocab or tokens x experts) holds 1100585369600 "
     "elements; at most 2^40 are allowed: use more train.micro_batches or "
     "more ranks"},
    {"Parameters",
     {{"model.layers", "1024"}, {"model.d_model", "16384"}},
     {{"model.layers", "1024"}, {"model.d_model", "32768"}},
     "model: has 4810967384064 parameters; at most 2^41 = 2199023255552 are "
     "allowed (layers, d_model, experts, ffn_hidden, shared experts and vocab "
     "make them)"},
    // Tied, the embedding's table is the head's: vocab x d_model fewer.
    {"ParametersTied",
     {{"model.layers", "106"},
      {"model.d_model", "65536"},
      {"model.vocab", "4194304"},
      {"model.tie_embeddings", "true"}},
     {{"model.layers", "106"},
      {"model.d_model", "65536"},
      {"model.vocab", "4194304"}},
     "model: has 2456253956096 parameters; at most 2^41 = 2199023255552 are "
     "allowed (layers, d_model, experts, ffn_hidden, shared experts and vocab "
     "make them)"},
    {"DispatchChunks",
     {{"schedules.dispatch_chunk_tokens", "1"}},
     {{"schedules.dispatch_chunk_tokens", "1"}, {"data.batch_tokens", "4096"}},
     "schedules.dispatch_chunk_tokens: 1 splits the 8192 token copies a rank "
     "routes per micro-batch into up to 8192 chunks; at most 4096 are "
     "allowed, so use at least 2"},
    {"DataPathLength",
     {{"data.path", std::string(4096, 'd')}},
     {{"data.path", std::string(4097, 'd')}},
     "data.path: is 4097 characters long; at most 4096 are allowed"},
    {"RmsEpsilonLow",
     {{"model.rms_epsilon", "1e-12"}},
     {{"model.rms_epsilon", "0"}},
     "model.rms_epsilon: 0 is not in (0, 0.01]"},
    {"RmsEpsilonHigh",
     {{"model.rms_epsilon", "0.01"}},
     {{"model.rms_epsilon", "0.02"}},
     "model.rms_epsilon: 0.02 is not in (0, 0.01]"},
    {"InitFromLength",
     {{"init_from", std::string(4096, 'i')}},
     {{"init_from", std::string(4097, 'i')}},
     "init_from: is 4097 characters long; at most 4096 are allowed"},
    {"DispatchChunkTokens",
     {{"schedules.dispatch_chunk_tokens", "0"}},
     {{"schedules.dispatch_chunk_tokens", "-1"}},
     "schedules.dispatch_chunk_tokens: -1 is not in 0..1073741824 (0 "
     "dispatches everything at once)"},
    {"DispatchChunkTokensHigh",
     {{"schedules.dispatch_chunk_tokens", "1073741824"}},
     {{"schedules.dispatch_chunk_tokens", "1073741825"}},
     "schedules.dispatch_chunk_tokens: 1073741825 is not in 0..1073741824 (0 "
     "dispatches everything at once)"},
    {"LearningRateLow",
     {{"optimizer.lr", "1e-9"}},
     {{"optimizer.lr", "0.0"}},
     "optimizer.lr: 0 is not in (0, 10]"},
    {"LearningRateHigh",
     {{"optimizer.lr", "10"}},
     {{"optimizer.lr", "10.5"}},
     "optimizer.lr: 10.5 is not in (0, 10]"},
    {"WeightDecay",
     {{"optimizer.weight_decay", "0"}},
     {{"optimizer.weight_decay", "-0.1"}},
     "optimizer.weight_decay: -0.1 must be a number >= 0"},
    {"Beta2",
     {{"optimizer.betas", "[0, 0.999]"}},
     {{"optimizer.betas", "[0.9, 1.0]"}},
     "optimizer.betas[1]: 1 is not in [0, 1)"},
    {"Beta1",
     {{"optimizer.betas", "[0.0, 0.95]"}},
     {{"optimizer.betas", "[-0.1, 0.95]"}},
     "optimizer.betas[0]: -0.1 is not in [0, 1)"},
    {"BetasCount",
     {{"optimizer.betas", "[0.8, 0.9]"}},
     {{"optimizer.betas", "[0.8, 0.9, 0.99]"}},
     "optimizer.betas: expected exactly 2 values (beta1, beta2), got 3"},
    {"WarmupSteps",
     {{"optimizer.warmup_steps", "0"}},
     {{"optimizer.warmup_steps", "-1"}},
     "optimizer.warmup_steps: -1 is not in 0..1000000000"},
    {"WarmupStepsHigh",
     {{"optimizer.warmup_steps", "1000000000"}},
     {{"optimizer.warmup_steps", "1000000001"}},
     "optimizer.warmup_steps: 1000000001 is not in 0..1000000000"},
    {"GradClip",
     {{"optimizer.grad_clip", "0"}},
     {{"optimizer.grad_clip", "-1"}},
     "optimizer.grad_clip: -1 must be a number >= 0 (0 disables clipping)"},
    {"Steps",
     {{"train.steps", "1"}},
     {{"train.steps", "0"}},
     "train.steps: 0 is not in 1..1000000000"},
    {"StepsHigh",
     {{"train.steps", "1000000000"}},
     {{"train.steps", "1000000001"}},
     "train.steps: 1000000001 is not in 1..1000000000"},
    {"CheckpointEvery",
     {{"train.checkpoint_every", "0"}},
     {{"train.checkpoint_every", "-1"}},
     "train.checkpoint_every: -1 is not in 0..1000000000 (0 means no "
     "periodic checkpoints)"},
    {"CheckpointEveryHigh",
     {{"train.checkpoint_every", "1000000000"}},
     {{"train.checkpoint_every", "1000000001"}},
     "train.checkpoint_every: 1000000001 is not in 0..1000000000 (0 means no "
     "periodic checkpoints)"},
    {"EvalEvery",
     {{"train.eval_every", "0"}},
     {{"train.eval_every", "-1"}},
     "train.eval_every: -1 is not in 0..1000000000 (0 means no eval)"},
    {"EvalEveryHigh",
     {{"train.eval_every", "1000000000"}},
     {{"train.eval_every", "1000000001"}},
     "train.eval_every: 1000000001 is not in 0..1000000000 (0 means no "
     "eval)"},
    {"MaxRestartsLow",
     {{"train.max_restarts", "0"}},
     {{"train.max_restarts", "-1"}},
     "train.max_restarts: -1 is not in 0..100"},
    {"MaxRestartsHigh",
     {{"train.max_restarts", "100"}},
     {{"train.max_restarts", "101"}},
     "train.max_restarts: 101 is not in 0..100"},
    {"Seed",
     {{"train.seed", "18446744073709551615"}},
     {{"train.seed", "18446744073709551616"}},
     "train.seed: '18446744073709551616' does not fit in a non-negative "
     "integer (0..18446744073709551615)"},
    {"TimeLimit",
     {{"train.time_limit", "1s"}},
     {{"train.time_limit", "0m"}},
     "train.time_limit: must be longer than zero, got 0s"},
};

INSTANTIATE_TEST_SUITE_P(
    Rules, JobSpecBoundaryTest, ::testing::ValuesIn(kBoundaryCases),
    [](const ::testing::TestParamInfo<BoundaryCase>& info) {
      return info.param.label;
    });

TEST(JobSpecTest, AbsentDpTakesTheDevicesEpAndPpLeave) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml(SpecText()
                           .Set("resources.nodes", "2")
                           .Set("resources.devices_per_node", "4")
                           .Set("parallel.ep", "2")
                           .Yaml());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().dp(), 4);
  // Given, it is checked as before.
  EXPECT_THAT(ProblemsOf(SpecText()
                             .Set("resources.devices_per_node", "4")
                             .Set("parallel.ep", "2")
                             .Set("parallel.dp", "1")),
              ElementsAre(HasSubstr("parallel: ep*pp*dp = 2*1*1 = 2 does "
                                    "not equal resources")));
  // ep x pp not dividing the devices leaves dp at 1, and the layout wrong.
  EXPECT_THAT(ProblemsOf(SpecText()
                             .Set("resources.devices_per_node", "4")
                             .Set("parallel.ep", "8")),
              Contains(HasSubstr("parallel: ep*pp*dp = 8*1*1")));
}

TEST(JobSpecTest, ElasticNodesParseRenderAndSize) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml(SpecText()
                           .Set("resources.nodes", "4")
                           .Set("resources.min_nodes", "1")
                           .Set("resources.devices_per_node", "2")
                           .Set("parallel.ep", "2")
                           .Yaml());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resources().min_nodes(), 1);
  EXPECT_EQ(spec->parallel().dp(), 4);  // at the most nodes
  EXPECT_EQ(NodesText(spec->resources()), "1-4");
  ExpectRoundTrip(*spec);
  EXPECT_THAT(JobSpecToYaml(*spec), HasSubstr("  min_nodes: 1\n"));

  absl::StatusOr<v1::JobSpec> on_two = SpecForNodes(*spec, 2);
  ASSERT_TRUE(on_two.ok()) << on_two.status();
  EXPECT_EQ(on_two->resources().nodes(), 2);
  EXPECT_FALSE(on_two->resources().has_min_nodes());
  EXPECT_EQ(on_two->parallel().ep(), 2);
  EXPECT_EQ(on_two->parallel().dp(), 2);
  EXPECT_TRUE(ValidateJobSpec(*on_two).ok()) << ValidateJobSpec(*on_two);
  // 8 sequences split into ep 2 x dp 3 = 6 parts do not divide: 3 nodes
  // are skipped.
  EXPECT_THAT(AttemptNodeCounts(*spec), ElementsAre(4, 2, 1));

  v1::JobSpec fixed = *spec;
  fixed.mutable_resources()->clear_min_nodes();
  EXPECT_THAT(AttemptNodeCounts(fixed), ElementsAre(4));
  EXPECT_EQ(NodesText(fixed.resources()), "4");
  v1::JobSpec odd = *spec;
  odd.mutable_parallel()->set_ep(4);
  odd.mutable_parallel()->set_dp(2);
  EXPECT_THAT(SpecForNodes(odd, 1).status().message(),
              HasSubstr("1 node x 2 devices = 2 devices, not a multiple of "
                        "parallel.ep x pp = 4"));
}

TEST(JobSpecTest, ElasticRangeIsValidatedAtItsFewestNodes) {
  const SpecText elastic = SpecText()
                               .Set("resources.nodes", "4")
                               .Set("resources.devices_per_node", "2")
                               .Set("parallel.ep", "2");
  EXPECT_THAT(ProblemsOf(SpecText(elastic).Set("resources.min_nodes", "5")),
              ElementsAre("resources.min_nodes: 5 exceeds resources.nodes "
                          "4"));
  // At 3 nodes dp is 3, and 8 sequences do not split over ep 2 x dp 3.
  EXPECT_THAT(
      ProblemsOf(SpecText(elastic).Set("resources.min_nodes", "3")),
      ElementsAre("resources.min_nodes: at 3 nodes (parallel.dp 3), "
                  "data.batch_tokens: 2048 holds 8 sequences, which do not "
                  "divide evenly into train.micro_batches 1 x parallel.ep 2 "
                  "x parallel.dp 3 = 6 parts"));
  // ep x pp must divide the fewest nodes' devices too.
  EXPECT_THAT(ProblemsOf(SpecText(elastic)
                             .Set("parallel.ep", "4")
                             .Set("resources.min_nodes", "1")),
              ElementsAre(HasSubstr("resources.min_nodes: 1 node x 2 "
                                    "devices = 2 devices, not a multiple "
                                    "of")));
  // A rank's share at the fewest nodes is held to the same bounds.
  EXPECT_THAT(ProblemsOf(SpecText(elastic)
                             .Set("resources.min_nodes", "1")
                             .Set("schedules.dispatch_chunk_tokens", "128")
                             .Set("data.batch_tokens", "2097152")),
              Contains(HasSubstr("resources.min_nodes: at 1 nodes "
                                 "(parallel.dp 1), "
                                 "schedules.dispatch_chunk_tokens")));
  EXPECT_THAT(ProblemsOf(SpecText(elastic).Set("resources.min_nodes", "-1")),
              ElementsAre(HasSubstr("resources.min_nodes: -1 is negative")));
  // 0, or nodes itself: not elastic.
  for (const char* not_elastic : {"0", "4"}) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
        SpecText(elastic).Set("resources.min_nodes", not_elastic).Yaml());
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_FALSE(IsElastic(spec->resources()));
    EXPECT_EQ(NodesText(spec->resources()), "4");
    EXPECT_THAT(AttemptNodeCounts(*spec), ElementsAre(4));
  }
}

}  // namespace
}  // namespace plateau
