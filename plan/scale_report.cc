// The tables of docs/SCALE.md: for MoE models shaped like gpt-oss-120b,
// Qwen3-235B-A22B and DeepSeek-V3, on 8 to 256 devices of 141 GB, the
// longest sequence that trains (one sequence per data-parallel rank, one
// micro-batch, AdamW) with an FSDP-style baseline and with Plateau's four
// schedules, and which peak binds at that length.
//
// The baseline is not a layout the engine runs, so it is derived from the
// model's unscheduled step without expert parallelism (every rank computes
// its tokens' experts itself): weights, gradients and AdamW state sharded
// over all devices (16 bytes a parameter in all, divided by N) instead of
// replicated, plus the one layer FSDP gathers at a time, with its gradient
// during backward (in float32, or under bf16 both in bf16, as FSDP's mixed
// precision holds them; the engine's own bf16 copy of a layer's weights is
// counted with the weights it replaces). The scheduled runs are the memory
// model's own prediction of the engine: of the expert x pipeline x data layouts
// and dispatch chunk caps tried, the one that reaches furthest; with
// --gradient_accumulation bf16 they keep the gradients of the product
// weights and the embedding in bf16 (the job spec's
// `gradient_accumulation`; bf16 precision only).
//
// With --checkpoints it prints instead, for each shape on 8, 64 and 256
// devices in nodes of 8, what a sharded checkpoint costs (the planner's
// MemoryPlan fields): the bytes each rank writes, each node's host memory
// with a write in flight, and a node's write time at a stated rate.
//
// Usage: scale_report [--device_memory BYTES] [--margin FRACTION]
//                     [--precision bf16|fp32]
//                     [--gradient_accumulation fp32|bf16]
//                     [--checkpoints [--checkpoint_write_bytes_per_second R]]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/model_config.h"
#include "engine/model/parameter_layout.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "proto/job.pb.h"
#include "proto/job_spec.h"

ABSL_FLAG(int64_t, device_memory, int64_t{141} * 1000 * 1000 * 1000,
          "each device's memory (H200: 141 GB)");
ABSL_FLAG(double, margin, 0.05, "the share of each device kept free");
ABSL_FLAG(std::string, precision, "bf16",
          "the models' precision (the job spec's `precision`): bf16 or fp32");
ABSL_FLAG(std::string, gradient_accumulation, "fp32",
          "the scheduled runs' gradients (the job spec's "
          "`gradient_accumulation`): fp32 or bf16 (with --precision bf16)");
ABSL_FLAG(bool, checkpoints, false,
          "print the checkpoint table (bytes per rank, host memory per node, "
          "write time) instead of the reach table");
ABSL_FLAG(double, checkpoint_write_bytes_per_second, 1e9,
          "--checkpoints: how fast a node writes checkpoint files");

namespace plateau::plan {
namespace {

struct Shape {
  std::string name;
  int layers, d_model, heads, kv_heads, experts, top_k, ffn_hidden, vocab;
  bool qk_norm;
  int shared_experts;  // of ffn_hidden each
};

// Shaped like the named models, with their grouped-query attention (8 and 4
// key-value heads), Qwen3's QK-norm and DeepSeek-V3's shared expert;
// attention as docs/ARCHITECTURE.md section 8 defines it (head_dim =
// d_model / heads; DeepSeek-V3's latent attention as multi-head
// attention), and no dense layers.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {"gpt-oss-120b-like", 36, 2880, 64, 8, 128, 4, 2880, 201088, false, 0},
      {"Qwen3-235B-A22B-like", 94, 4096, 64, 4, 128, 8, 1536, 151936, true, 0},
      {"DeepSeek-V3-like", 58, 7168, 128, 128, 256, 8, 2048, 129280, false, 1},
  };
  return shapes;
}

// `chunk_tokens` 0: no schedule at all; else all four, PipelinedLLEP's
// chunks capped at that many copies.
v1::JobSpec SpecOf(const Shape& shape, int ep, int pp, int dp, int64_t seq_len,
                   int64_t chunk_tokens) {
  const bool scheduled = chunk_tokens > 0;
  v1::JobSpec spec;
  spec.set_name("scale");
  // Nodes of 8 devices, as the checkpoint table's host memory assumes (a
  // device's peak does not depend on its node).
  const int devices = ep * pp * dp;
  spec.mutable_resources()->set_nodes(std::max(1, devices / 8));
  spec.mutable_resources()->set_devices_per_node(std::min(devices, 8));
  v1::ModelSpec& model = *spec.mutable_model();
  model.set_layers(shape.layers);
  model.set_d_model(shape.d_model);
  model.set_heads(shape.heads);
  model.set_kv_heads(shape.kv_heads);
  model.set_qk_norm(shape.qk_norm);
  model.set_experts(shape.experts);
  model.set_top_k(shape.top_k);
  model.set_ffn_hidden(shape.ffn_hidden);
  model.set_shared_experts(shape.shared_experts);
  model.set_vocab(shape.vocab);
  model.set_seq_len(static_cast<int32_t>(seq_len));
  spec.mutable_parallel()->set_ep(ep);
  spec.mutable_parallel()->set_pp(pp);
  spec.mutable_parallel()->set_dp(dp);
  v1::ScheduleSpec& schedules = *spec.mutable_schedules();
  schedules.set_activation_checkpointing(true);
  schedules.set_dispatch_chunk_tokens(chunk_tokens);
  schedules.set_ring_dtp(scheduled);
  schedules.set_sco(scheduled);
  schedules.set_optimizer_offload(scheduled ? v1::OPTIMIZER_OFFLOAD_STREAM
                                            : v1::OPTIMIZER_OFFLOAD_NONE);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_KIND_ADAMW);
  spec.mutable_data()->set_batch_tokens(seq_len * ep * dp);
  spec.mutable_train()->set_steps(1);
  spec.mutable_train()->set_micro_batches(1);
  spec.set_precision(absl::GetFlag(FLAGS_precision) == "fp32"
                         ? v1::PRECISION_FP32
                         : v1::PRECISION_BF16);
  if (scheduled && absl::GetFlag(FLAGS_gradient_accumulation) == "bf16") {
    spec.set_gradient_accumulation(v1::GRADIENT_ACCUMULATION_BF16);
  }
  return spec;
}

int64_t Parameters(const Shape& shape) {
  const engine::ModelConfig config =
      engine::ModelConfigFromSpec(SpecOf(shape, 1, 1, 1, 1, 0));
  return engine::ParameterLayout(config).total_elements();
}

// One layer's parameters (attention, norms, router, every expert, the
// shared ones too).
int64_t LayerParameters(const Shape& shape) {
  const int64_t d = shape.d_model;
  const int64_t head_dim = d / shape.heads;
  const int64_t kv_width = head_dim * shape.kv_heads;
  return 2 * d * d + 2 * kv_width * d + 2 * d +
         (shape.qk_norm ? 2 * head_dim : 0) + shape.experts * d +
         int64_t{3} * (shape.experts + shape.shared_experts) *
             shape.ffn_hidden * d;
}

struct Outcome {
  int64_t peak_bytes = 0;
  v1::MemoryComponent binding = v1::MEMORY_COMPONENT_UNSPECIFIED;
};

Outcome FsdpBaseline(const Shape& shape, int devices, int64_t seq_len) {
  absl::StatusOr<v1::MemoryPrediction> prediction = PredictMemory(
      SpecOf(shape, 1, 1, devices, seq_len, 0), Routing::WorstCase());
  if (!prediction.ok()) return {INT64_MAX, v1::MEMORY_COMPONENT_UNSPECIFIED};
  const v1::RankPrediction& rank = *WorstRank(*prediction);
  const int64_t sharded = 16 * Parameters(shape) / devices;
  const int64_t gathered_bytes_per_parameter =
      absl::GetFlag(FLAGS_precision) == "fp32" ? 2 * 4 : 2 * 2;
  const int64_t gathered =
      gathered_bytes_per_parameter * LayerParameters(shape);
  int64_t other = rank.device_peak_bytes();
  for (v1::MemoryComponent state :
       {v1::MEMORY_COMPONENT_WEIGHTS, v1::MEMORY_COMPONENT_GRADIENTS,
        v1::MEMORY_COMPONENT_OPTIMIZER, v1::MEMORY_COMPONENT_STAGING}) {
    other -= DeviceBytesAtPeak(rank, state);
  }
  Outcome outcome;
  outcome.peak_bytes = other + sharded + gathered;
  // The largest of the states (together) and the step's components.
  int64_t largest = sharded + gathered;
  outcome.binding = v1::MEMORY_COMPONENT_WEIGHTS;
  for (const v1::PredictedPeak& peak : rank.device_at_peak()) {
    if (peak.component() == v1::MEMORY_COMPONENT_WEIGHTS ||
        peak.component() == v1::MEMORY_COMPONENT_GRADIENTS ||
        peak.component() == v1::MEMORY_COMPONENT_OPTIMIZER ||
        peak.component() == v1::MEMORY_COMPONENT_STAGING) {
      continue;
    }
    if (peak.peak_bytes() > largest) {
      largest = peak.peak_bytes();
      outcome.binding = peak.component();
    }
  }
  return outcome;
}

Outcome Scheduled(const Shape& shape, int ep, int pp, int dp,
                  int64_t chunk_tokens, int64_t seq_len) {
  absl::StatusOr<v1::MemoryPrediction> prediction = PredictMemory(
      SpecOf(shape, ep, pp, dp, seq_len, chunk_tokens), Routing::WorstCase());
  if (!prediction.ok()) return {INT64_MAX, v1::MEMORY_COMPONENT_UNSPECIFIED};
  return {prediction->device_peak_bytes(), prediction->binding_component()};
}

// The longest sequence (a multiple of 1024 tokens, up to 16M) for which
// `outcome` fits; 0 when none does.
int64_t Reach(const std::function<Outcome(int64_t)>& outcome, int64_t usable) {
  auto fits = [&](int64_t k) { return outcome(k * 1024).peak_bytes <= usable; };
  if (!fits(1)) return 0;
  int64_t good = 1, bad = 0;
  for (int64_t k = 2; bad == 0; k *= 2) {
    if (k > 16384) return 16384 * 1024;
    (fits(k) ? good : bad) = k;
  }
  while (bad - good > 1) {
    const int64_t middle = (good + bad) / 2;
    (fits(middle) ? good : bad) = middle;
  }
  return good * 1024;
}

std::string Tokens(int64_t tokens) {
  if (tokens == 0) return "does not fit";
  if (tokens >= 1024 * 1024) {
    return absl::StrFormat("%.2fM", static_cast<double>(tokens) / (1 << 20));
  }
  return absl::StrFormat("%dk", tokens / 1024);
}

std::string Name(v1::MemoryComponent component) {
  return SpecEnumName(*v1::MemoryComponent_descriptor(), component);
}

void Report() {
  const int64_t usable = UsableBytes(absl::GetFlag(FLAGS_device_memory),
                                     absl::GetFlag(FLAGS_margin));
  std::printf(
      "| model | params | devices | baseline reach | binds | scheduled reach "
      "| layout (ep x pp x dp, chunk cap) | binds | ratio |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Shape& shape : Shapes()) {
    for (int devices : {8, 32, 64, 256}) {
      const int64_t baseline = Reach(
          [&](int64_t seq_len) {
            return FsdpBaseline(shape, devices, seq_len);
          },
          usable);
      int64_t best = 0, best_chunk = 0;
      int best_ep = 0, best_pp = 0;
      const int widest_ep = std::min(devices, shape.experts);
      for (int ep : {widest_ep, widest_ep / 2}) {
        for (int pp : {1, 2, 4}) {
          if (ep < 1 || devices % (ep * pp) != 0 || shape.layers % pp != 0) {
            continue;
          }
          const int dp = devices / (ep * pp);
          for (int64_t chunk : {4096, 1024, 256}) {
            const int64_t reach = Reach(
                [&](int64_t seq_len) {
                  return Scheduled(shape, ep, pp, dp, chunk, seq_len);
                },
                usable);
            if (reach > best) {
              best = reach;
              best_ep = ep;
              best_pp = pp;
              best_chunk = chunk;
            }
          }
        }
      }
      const std::string baseline_binds =
          Name(FsdpBaseline(shape, devices, std::max<int64_t>(baseline, 1024))
                   .binding);
      const std::string layout =
          best > 0
              ? absl::StrCat(best_ep, " x ", best_pp, " x ",
                             devices / (best_ep * best_pp), ", C ", best_chunk)
              : "-";
      const std::string scheduled_binds =
          best > 0
              ? Name(Scheduled(shape, best_ep, best_pp,
                               devices / (best_ep * best_pp), best_chunk, best)
                         .binding)
              : "-";
      const std::string ratio =
          baseline > 0 && best > 0
              ? absl::StrFormat("%.1fx", static_cast<double>(best) /
                                             static_cast<double>(baseline))
              : "-";
      std::printf("| %s | %.0fB | %d | %s | %s | %s | %s | %s | %s |\n",
                  shape.name.c_str(),
                  static_cast<double>(Parameters(shape)) / 1e9, devices,
                  Tokens(baseline).c_str(), baseline_binds.c_str(),
                  Tokens(best).c_str(), layout.c_str(), scheduled_binds.c_str(),
                  ratio.c_str());
      std::fflush(stdout);
    }
  }
}

// A sharded checkpoint of each shape at the longest-reach layouts' widest
// expert parallelism, one stage, the rest data parallel, 4096 tokens a
// sequence, with all four schedules (the optimizer on the host).
void CheckpointReport() {
  const double rate = absl::GetFlag(FLAGS_checkpoint_write_bytes_per_second);
  std::printf(
      "| model | params | devices | layout (ep x pp x dp) | written per rank "
      "| host memory per node | a node's write at %s/s |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n",
      absl::StrFormat("%g GB", rate / 1e9).c_str());
  for (const Shape& shape : Shapes()) {
    for (int devices : {8, 64, 256}) {
      const int ep = std::min(devices, shape.experts);
      const int dp = devices / ep;
      PlanOptions options;
      options.device_memory_bytes = absl::GetFlag(FLAGS_device_memory);
      options.margin = absl::GetFlag(FLAGS_margin);
      options.search_reach = false;
      options.checkpoint_write_bytes_per_second = rate;
      absl::StatusOr<JobPlan> planned =
          PlanJob(SpecOf(shape, ep, 1, dp, 4096, 4096), options);
      if (!planned.ok()) {
        std::fprintf(stderr, "%s on %d devices: %s\n", shape.name.c_str(),
                     devices, std::string(planned.status().message()).c_str());
        continue;
      }
      const v1::MemoryPlan& plan = planned->memory;
      const int node_ranks = std::min(devices, 8);
      std::printf(
          "| %s | %.0fB | %d | %d x 1 x %d | %.1f GB | %.0f GB | %.0f s |\n",
          shape.name.c_str(), static_cast<double>(Parameters(shape)) / 1e9,
          devices, ep, dp,
          static_cast<double>(plan.node_checkpoint_bytes()) / node_ranks / 1e9,
          static_cast<double>(plan.node_host_bytes()) / 1e9,
          plan.node_checkpoint_write_seconds());
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace plateau::plan

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (precision != "bf16" && precision != "fp32") {
    std::fprintf(stderr, "--precision: expected bf16 or fp32, got '%s'\n",
                 precision.c_str());
    return 2;
  }
  const std::string accumulation = absl::GetFlag(FLAGS_gradient_accumulation);
  if (accumulation != "fp32" &&
      (accumulation != "bf16" || precision != "bf16")) {
    std::fprintf(stderr,
                 "--gradient_accumulation: expected fp32, or bf16 with "
                 "--precision bf16, got '%s'\n",
                 accumulation.c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_checkpoints)) {
    if (!(absl::GetFlag(FLAGS_checkpoint_write_bytes_per_second) > 0)) {
      std::fprintf(stderr,
                   "--checkpoint_write_bytes_per_second must be positive\n");
      return 2;
    }
    plateau::plan::CheckpointReport();
  } else {
    plateau::plan::Report();
  }
  return 0;
}
