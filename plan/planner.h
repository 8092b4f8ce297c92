// The memory planner (docs/PLANNER.md): for a job spec and the memory of
// its devices, the peak bytes of every rank, pool and component, predicted
// by replaying the allocations of the engine's step (memory_model.h); the
// schedules' sizes that fit; and how far the job could grow.
//
// Used by plateaud (admission), the plateau CLI (`plateau plan`) and the
// worker (a standalone run of a `schedules: auto` spec). Pure computation:
// no I/O, no devices.
#ifndef PLATEAU_PLAN_PLANNER_H_
#define PLATEAU_PLAN_PLANNER_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/node.pb.h"
#include "proto/plan.pb.h"

namespace plateau::plan {

struct PlanOptions {
  // Each device's memory. Required (> 0).
  int64_t device_memory_bytes = 0;
  // When > 0, the job runs on this many devices instead of the spec's
  // ep x pp x dp: data parallelism absorbs the difference (ep x pp must
  // divide it), on nodes of the spec's devices_per_node (fewer devices:
  // one node).
  int devices = 0;
  // Unset: the worst routing (Routing::WorstCase() in memory_model.h),
  // which every whole dispatch's plan then holds. Set: a stated skew
  // instead, the busiest expert's routed token copies over the mean
  // expert's in every layer (1: uniform; the
  // plateau_expert_load_imbalance_ratio metric), at most experts / top_k:
  // what a job would need under a router known to be that even.
  std::optional<double> routing_skew;
  // The share of each device kept free: a job fits when its predicted
  // device peak is at most (1 - margin) x device_memory_bytes.
  double margin = 0.05;
  // Also search the largest seq_len and batch_tokens that fit (MemoryPlan's
  // max_* fields, and the explanation's last sentence): about 80 more
  // predictions, for `plateau plan`. Admission and training need only
  // whether the job fits, and skip it.
  bool search_reach = true;
  // A node's rate of writing checkpoint files, for
  // MemoryPlan.node_checkpoint_write_seconds: 1 GB/s unless stated
  // (plateaud's --checkpoint_write_bytes_per_second).
  double checkpoint_write_bytes_per_second = 1e9;
  // How long a stop may take (plateaud's --stop_grace_period), for
  // MemoryPlan.stop_grace_seconds; 0: not known.
  double stop_grace_seconds = 0;
};

struct JobPlan {
  v1::MemoryPlan memory;
  // The spec as planned: with `schedules: auto`, the chosen schedules set
  // (auto kept true); with PlanOptions.devices, the layout and resources
  // scaled to them; otherwise the spec itself.
  v1::JobSpec spec;
};

// The plan of `spec`. With schedules.auto the planner chooses every
// schedule field the spec leaves unset, the cheapest in throughput that
// fits; otherwise it predicts the spec's schedules. INVALID_ARGUMENT for
// bad options or devices the layout cannot use. A job that does not fit is
// a plan with fits false, not an error. An elastic spec (resources.
// min_nodes below nodes, without PlanOptions.devices) is planned at both
// ends of its range (MemoryPlan.min_nodes_*): its schedules are chosen, and
// its reach searched, at min_nodes, where each rank holds the most; it fits
// only where both ends fit. REQUIRES: spec passed ValidateJobSpec.
absl::StatusOr<JobPlan> PlanJob(const v1::JobSpec& spec,
                                const PlanOptions& options);

// What a plan counts on of a device of `device_memory_bytes`:
// floor((1 - margin) x device_memory_bytes). A job fits when its device
// peak is at most that.
int64_t UsableBytes(int64_t device_memory_bytes, double margin);

// The memory a plan may count on for each of a node's devices: the smallest
// of its devices' (a job may get any of them); 0 when it reports none.
int64_t NodeDeviceMemoryBytes(const v1::Node& node);

}  // namespace plateau::plan

#endif  // PLATEAU_PLAN_PLANNER_H_
