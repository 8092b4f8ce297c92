#include "plan/precision_choice.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace plateau::plan {

bool IsAutoPrecision(const v1::JobSpec& spec) {
  return spec.precision() == v1::PRECISION_UNSPECIFIED ||
         spec.precision() == v1::PRECISION_AUTO;
}

PrecisionChoice ChoosePrecision(const v1::JobSpec& spec,
                                absl::Span<const PrecisionDevice> devices,
                                bool fp32_fits) {
  if (!IsAutoPrecision(spec)) {
    return {spec.precision(), "set in the spec"};
  }
  if (spec.gradient_accumulation() == v1::GRADIENT_ACCUMULATION_BF16) {
    return {v1::PRECISION_BF16,
            "auto: gradient_accumulation: bf16 needs bf16 products"};
  }
  // The slowest CPU device decides: a step waits for every rank.
  const PrecisionDevice* slowest = nullptr;
  for (const PrecisionDevice& device : devices) {
    if (device.device.kind() == v1::DEVICE_KIND_CUDA) continue;
    if (slowest == nullptr || device.device.bf16_product_speedup() <
                                  slowest->device.bf16_product_speedup()) {
      slowest = &device;
    }
  }
  if (slowest == nullptr) {
    return {v1::PRECISION_BF16,
            devices.empty() ? "auto: no devices measured; bf16 by default"
                            : "auto: GPUs, whose tensor cores run bf16 "
                              "products faster than fp32's"};
  }
  const double speedup = slowest->device.bf16_product_speedup();
  const std::string measured =
      speedup > 0
          ? absl::StrFormat("bf16 products %.2fx fp32's on %s", speedup,
                            slowest->node)
          : absl::StrCat(slowest->node, " did not measure its bf16 products");
  if (speedup >= kBf16SpeedupToChooseIt) {
    return {v1::PRECISION_BF16, absl::StrCat("auto: ", measured)};
  }
  if (fp32_fits) {
    return {v1::PRECISION_FP32,
            absl::StrCat("auto: ", measured,
                         absl::StrFormat(" (bf16 needs %.2fx); it fits in fp32",
                                         kBf16SpeedupToChooseIt))};
  }
  return {v1::PRECISION_BF16,
          absl::StrCat("auto: ", measured,
                       ", but the job fits its devices only in bf16")};
}

absl::StatusOr<JobPlan> PlanForNodes(
    const v1::JobSpec& spec, const PlanOptions& options,
    absl::Span<const v1::Node> nodes,
    const std::function<absl::StatusOr<JobPlan>(const v1::JobSpec&,
                                                const PlanOptions&)>& planner) {
  if (!IsAutoPrecision(spec)) return planner(spec, options);
  std::vector<PrecisionDevice> devices;
  for (const v1::Node& node : nodes) {
    if (node.devices_size() < spec.resources().devices_per_node()) continue;
    for (const v1::Device& device : node.devices()) {
      devices.push_back({node.name(), device});
    }
  }
  v1::JobSpec chosen = spec;
  std::string reason =
      "auto, planned in bf16, its least memory: no node to choose for; a "
      "job's first attempt chooses by its devices' bf16 speed";
  if (!devices.empty()) {
    v1::JobSpec fp32 = spec;
    fp32.set_precision(v1::PRECISION_FP32);
    ASSIGN_OR_RETURN(const JobPlan fp32_plan, planner(fp32, options));
    const PrecisionChoice choice =
        ChoosePrecision(spec, devices, fp32_plan.memory.fits());
    chosen.set_precision(choice.precision);
    reason = absl::StrCat(choice.reason,
                          "; for the nodes now, chosen again at a job's "
                          "first attempt for the devices it gets");
  }
  ASSIGN_OR_RETURN(JobPlan planned, planner(chosen, options));
  planned.memory.set_precision_reason(reason);
  return planned;
}

}  // namespace plateau::plan
