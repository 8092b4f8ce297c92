// Admission (docs/ARCHITECTURE.md section 3, step 2): after a spec is validated
// and before it is persisted, its memory is planned (plan/planner.h) for the
// largest devices registered, so that a job that cannot fit them is turned
// away at submit, naming the component that binds, instead of failing on
// its first step; and a `schedules: auto` spec gets its schedules chosen.
//
// The devices planned for are the largest of the registered nodes with the
// job's devices_per_node devices, and of the node shapes the operator
// declares the cluster has (--node_shapes), if any.
//
// Outcomes of AdmitJob:
// - node shapes are declared and none has devices_per_node devices:
//   FAILED_PRECONDITION naming the field and the shapes;
// - neither a registered node (in any state) nor a declared shape with
//   devices_per_node devices reports their memory: a `schedules: auto` spec
//   is FAILED_PRECONDITION (there is nothing to choose for); any other is
//   admitted without a plan, and waits unplaced until such a node attaches
//   and the coordinator plans it (coordinator.h);
// - the plan does not fit: FAILED_PRECONDITION, "job does not fit its
//   devices: <the plan's explanation>"; or its node_host_bytes exceed the
//   largest node's host memory: FAILED_PRECONDITION naming both;
// - it fits: admitted with the plan, and with the spec as planned (the
//   chosen schedules set) and its YAML rewritten when that changed it.
#ifndef PLATEAU_DAEMON_ADMISSION_ADMISSION_H_
#define PLATEAU_DAEMON_ADMISSION_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "plan/planner.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace plateau::daemon {

// One kind of node: `devices` devices of device_memory_bytes each.
struct NodeShape {
  int devices = 0;
  int64_t device_memory_bytes = 0;
};

// "8x80GiB,4x24GiB": comma-separated DEVICESxMEMORY, memory as in
// common/byte_size.h. INVALID_ARGUMENT naming the entry that is not one.
absl::StatusOr<std::vector<NodeShape>> ParseNodeShapes(absl::string_view text);
// "8 x 80.00 GiB, 4 x 24.00 GiB".
std::string DescribeNodeShapes(const std::vector<NodeShape>& shapes);

// What admission plans for.
struct AdmissionDevices {
  // Any node registered, in any state.
  bool any_node = false;
  // The largest memory per device among the registered nodes with at least
  // the job's devices_per_node devices (NodeRegistry::
  // LargestDeviceMemoryBytes); 0 when none reports it.
  int64_t device_memory_bytes = 0;
  // Likewise the largest host memory; 0 when none reports it.
  int64_t host_memory_bytes = 0;
  // The cluster's declared node shapes; empty when none are declared.
  std::vector<NodeShape> declared_shapes;
};

// The memory per device admission plans `spec` for: the largest of the
// registered nodes' (devices.device_memory_bytes) and of the declared
// shapes with devices_per_node devices; 0 when none reports it.
// FAILED_PRECONDITION naming the field and the shapes when shapes are
// declared and none has that many devices.
absl::StatusOr<int64_t> AdmissionDeviceMemoryBytes(
    const v1::JobSpec& spec, const AdmissionDevices& devices);

// plan::PlanJob, or a stand-in for it.
using Planner = std::function<absl::StatusOr<plan::JobPlan>(
    const v1::JobSpec&, const plan::PlanOptions&)>;

struct AdmittedJob {
  v1::JobSpec spec;
  std::string spec_yaml;
  // Unset when there was no device to plan for.
  std::optional<v1::MemoryPlan> plan;
  // precision: auto: the job planned in fp32 (Job.fp32_alternative), where
  // it fits; `plan` is then bf16's.
  std::optional<v1::PlannedSpec> fp32_alternative;
};

// REQUIRES: spec passed ValidateJobSpec; spec_yaml is its YAML; `attached`
// is for spec.resources().devices_per_node. The plan kept holds each
// prediction's worst rank only: what `describe` shows, not the whole layout
// (tens of kilobytes for a wide job, rewritten with every change of the
// job's record). A spec of precision: auto must fit in bf16, the precision
// it can always fall back to; it is planned in fp32 too, which its first
// attempt may choose (plan/precision_choice.h).
absl::StatusOr<AdmittedJob> AdmitJob(const v1::JobSpec& spec,
                                     const std::string& spec_yaml,
                                     const AdmissionDevices& devices,
                                     const Planner& planner = plan::PlanJob);

// The memory each device of a node must have to run a job with `plan`: the
// smallest device size the planner would call a fit for its planned device
// peak (with the plan's margin kept free). 0 for an empty plan.
int64_t RequiredDeviceMemoryBytes(const v1::MemoryPlan& plan);
// Likewise for an elastic job's attempts on fewer than resources.nodes
// nodes: at MemoryPlan.min_nodes, where each rank holds the most. A plan
// that is not elastic needs RequiredDeviceMemoryBytes.
int64_t MinNodesRequiredDeviceMemoryBytes(const v1::MemoryPlan& plan);

// plan::PlanJob for the last `capacity` distinct (spec, options) pairs: the
// planner is pure, and a burst of submissions repeats a few specs. Plans
// come back with each prediction's worst rank only (as AdmitJob keeps
// them). Thread-safe; a miss plans outside the lock.
class PlanCache {
 public:
  explicit PlanCache(size_t capacity = 256) : capacity_(capacity) {}

  // A miss is planned by `planner` (plan::PlanJob, or one that waits for
  // its user's turn first: daemon/coordinator/planning_gate.h).
  absl::StatusOr<plan::JobPlan> Plan(const v1::JobSpec& spec,
                                     const plan::PlanOptions& options,
                                     const Planner& planner = plan::PlanJob);

 private:
  const size_t capacity_;
  absl::Mutex mutex_;
  std::map<std::string, plan::JobPlan> plans_ ABSL_GUARDED_BY(mutex_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mutex_);  // oldest first
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_ADMISSION_ADMISSION_H_
