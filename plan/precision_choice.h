// What `precision: auto` (the default) runs in, chosen once, at a job's
// first attempt, for the devices it is given, and kept with the job so that
// a requeue onto another CPU type never changes it mid-run
// (docs/ARCHITECTURE.md section 7):
//   - bf16 where every device's bf16 products are clearly faster than its
//     float32 ones (the agent measures a CPU when it attaches,
//     kernels/cpu/bf16_speedup.h; a GPU's tensor cores always are);
//   - fp32 otherwise, where the job fits its devices in fp32: bf16 would buy
//     memory, not speed, and cost a rounding of every stored activation;
//   - bf16 where only bf16 fits, or where the spec needs it
//     (gradient_accumulation: bf16).
#ifndef PLATEAU_PLAN_PRECISION_CHOICE_H_
#define PLATEAU_PLAN_PRECISION_CHOICE_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "plan/planner.h"
#include "proto/job.pb.h"
#include "proto/node.pb.h"

namespace plateau::plan {

// bf16 is chosen where its products run at least this many times float32's:
// on a CPU where they run about as fast, the step runs slower in bf16 for
// the roundings around its products (docs/BENCHMARKS.md, "bf16 on a CPU
// without bf16 kernels (AVX2)").
inline constexpr double kBf16SpeedupToChooseIt = 1.25;

// Whether the spec leaves its precision to auto (unset or `auto`).
bool IsAutoPrecision(const v1::JobSpec& spec);

struct PrecisionChoice {
  v1::Precision precision = v1::PRECISION_BF16;  // BF16 or FP32
  // Why, for logs and `describe`: "auto: bf16 products 3.41x fp32's on
  // node-a", "set in the spec", ...
  std::string reason;
};

// The devices one attempt runs on, with the node each is on.
struct PrecisionDevice {
  std::string node;
  v1::Device device;
};

// The precision `spec` runs in on `devices`. For an auto spec: the slowest
// device's measured bf16 speedup decides (a CUDA device counts as faster;
// an unmeasured CPU device as not), and `fp32_fits` says whether the job
// fits those devices in fp32. A spec that sets its precision keeps it.
PrecisionChoice ChoosePrecision(const v1::JobSpec& spec,
                                absl::Span<const PrecisionDevice> devices,
                                bool fp32_fits);

// `spec` planned as an attempt would run on `nodes` now (`plateau plan`,
// the PlanJob RPC): precision: auto chosen for the devices of the nodes with
// the spec's devices per node, its plan's precision_reason saying why and
// that the job's first attempt chooses again for the devices it gets (with
// no such node: planned in bf16, its least memory). `planner` is PlanJob or
// a cache of it.
absl::StatusOr<JobPlan> PlanForNodes(
    const v1::JobSpec& spec, const PlanOptions& options,
    absl::Span<const v1::Node> nodes,
    const std::function<absl::StatusOr<JobPlan>(
        const v1::JobSpec&, const PlanOptions&)>& planner = PlanJob);

}  // namespace plateau::plan

#endif  // PLATEAU_PLAN_PRECISION_CHOICE_H_
