// Job specs as users write them: the YAML of docs/ARCHITECTURE.md section 7,
// read into plateau.v1.JobSpec with defaults applied and every rule checked.
//
// Errors are absl::Status; no exception leaves these functions. An invalid
// spec gives INVALID_ARGUMENT whose message lists every problem found, one per
// line, each "<field path>: <reason>", e.g.
//   model.heads: 7 does not divide d_model 256
//   schedules.sco_x: unknown key; expected one of dispatch_chunk_tokens, ...
// Paths name YAML keys (`optimizer.betas[1]`); `spec` is the document itself.
//
// Defaults: priority 50; resources 1 node x 1 device; model rope_theta
// 10000, aux_loss_coefficient 0.01, kv_heads = heads and z_loss_coefficient 0
// (all four stay unset when absent), qk_norm false, balancing aux_loss,
// bias_update_rate 0.001 and router softmax (the last three unset when
// absent), shared_experts 0 and shared_ffn_hidden = ffn_hidden (unset when
// absent), rms_epsilon 1e-5 (unset when absent), tie_embeddings false;
// resources min_nodes 0 (not elastic); parallel ep = pp = 1 and dp the
// devices ep x pp leave (nodes x devices_per_node / (ep x pp), 1 when that
// does not divide); schedules dispatch_chunk_tokens 0, ring_dtp
// false, sco false (these three stay unset when absent; unset, they read as
// these values), optimizer_offload none, activation_checkpointing true;
// optimizer adamw, lr 3e-4, weight_decay 0.1, betas [0.9, 0.95],
// warmup_steps 0, grad_clip 1.0, expert_momentum fp32 for skewadam (unset
// for other kinds); train checkpoint_every 0 (no periodic checkpoints),
// eval_every 0 (none), seed 1, max_restarts 0, no time_limit; init_from ""
// (the seed's random weights).
// Required: name, all eight model fields, data.path, data.batch_tokens,
// train.steps.
//
// `schedules: auto` means {auto: true}; a mapping may give `auto: true` with
// some schedules pinned (`{auto: true, ring_dtp: true}`). With auto,
// dispatch_chunk_tokens, ring_dtp, sco and optimizer_offload get no default:
// those absent stay unset (optimizer_offload UNSPECIFIED) for the memory
// planner (//plan) to choose; activation_checkpointing keeps its default. A
// spec with auto may be run only once the planner has set all four.

#ifndef PLATEAU_PROTO_JOB_SPEC_H_
#define PLATEAU_PROTO_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace plateau {

// The largest model.seq_len and data.batch_tokens a spec may give. These and
// the other bounds (docs/ARCHITECTURE.md section 7) keep every size the
// engine and the planner compute from a spec inside int64, and the
// planner's time bounded.
inline constexpr int64_t kMaxSpecSeqLen = int64_t{1} << 20;
inline constexpr int64_t kMaxSpecBatchTokens = int64_t{1} << 30;

// Parses YAML text into a JobSpec, applies the defaults and validates it.
// A YAML syntax error is reported with its line and column.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml);

// ParseJobSpecYaml on the contents of the file at `path`. A missing file is
// NOT_FOUND; every error message, file or spec, starts with `path`.
absl::StatusOr<v1::JobSpec> ReadJobSpecFile(const std::string& path);

// Validates an already-built spec (e.g. one submitted as a proto over gRPC)
// with the same rules and messages as ParseJobSpecYaml. No defaults are
// applied: proto3 cannot tell an unset field from zero, so every field must
// hold its final value (an UNSPECIFIED enum is an error, except
// schedules.optimizer_offload with schedules.auto).
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// The spec of an attempt on `nodes` nodes (elastic jobs, resources.
// min_nodes): resources.nodes set to it, min_nodes cleared, ep and pp kept
// and parallel.dp the rest of the devices. INVALID_ARGUMENT when `nodes` is
// outside 1..resources.nodes or ep x pp does not divide the devices. At
// resources.nodes it is the spec itself, without min_nodes.
absl::StatusOr<v1::JobSpec> SpecForNodes(const v1::JobSpec& spec,
                                         int32_t nodes);

// The node counts an attempt of a valid `spec` may run on, most first:
// resources.nodes, then each count down to min_nodes whose SpecForNodes is
// valid (a count whose dp does not split the batch evenly is skipped).
std::vector<int32_t> AttemptNodeCounts(const v1::JobSpec& spec);

// Whether attempts may run on fewer nodes than resources.nodes:
// 1 <= min_nodes < nodes.
bool IsElastic(const v1::Resources& resources);

// Whether attempts may run on fewer nodes than resources.nodes:
// 1 <= min_nodes < nodes.
bool IsElastic(const v1::Resources& resources);

// The nodes a spec asks for, as tables show them: "4", or "2-4" for an
// elastic one.
std::string NodesText(const v1::Resources& resources);

// train.micro_batches, where 0 (unset in a JobSpec built in code) means 1.
int32_t MicroBatchesOf(const v1::TrainSpec& train);

// Renders `spec` as block-style YAML, every field in proto order (an unset
// time_limit, unset optional fields, UNSPECIFIED enums and a false
// schedules.auto left out). For any spec that
// ValidateJobSpec accepts, ParseJobSpecYaml(JobSpecToYaml(spec)) equals spec.
std::string JobSpecToYaml(const v1::JobSpec& spec);

// How the spec spells value `number` of one of its enums ("adamw",
// "stream"); "" for UNSPECIFIED.
std::string SpecEnumName(const google::protobuf::EnumDescriptor& type,
                         int number);

// How a job computes, in the words `plateau plan` and a run's log both use:
// `precision` ("bf16" or "fp32"), then whether the product weights and the
// embedding are stored in bf16 and whether their gradients accumulate in
// bf16.
std::string PrecisionDescription(absl::string_view precision,
                                 bool bf16_weight_storage, bool bf16_gradients);

}  // namespace plateau

#endif  // PLATEAU_PROTO_JOB_SPEC_H_
