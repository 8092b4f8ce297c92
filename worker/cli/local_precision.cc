#include "worker/cli/local_precision.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/bf16_speedup.h"
#include "nlohmann/json.hpp"
#include "plan/planner.h"
#include "worker/cli/flags.h"

namespace plateau::worker {

absl::StatusOr<plan::PrecisionChoice> ChooseLocalPrecision(
    const v1::JobSpec& spec, const RankBackend& backend) {
  plan::PrecisionDevice device;
  device.node = "this machine";
  if (backend.cuda) {
    device.device.set_kind(v1::DEVICE_KIND_CUDA);
  } else {
    device.device.set_kind(v1::DEVICE_KIND_CPU);
    device.device.set_bf16_product_speedup(
        kernels::cpu::MeasureBf16ProductSpeedup());
  }
  ASSIGN_OR_RETURN(const int64_t device_memory, DevicePoolBytes(backend));
  v1::JobSpec fp32 = spec;
  fp32.set_precision(v1::PRECISION_FP32);
  plan::PlanOptions planning;
  planning.device_memory_bytes = device_memory;
  planning.search_reach = false;
  ASSIGN_OR_RETURN(const plan::JobPlan planned, plan::PlanJob(fp32, planning));
  const std::vector<plan::PrecisionDevice> devices = {device};
  return plan::ChoosePrecision(spec, devices, planned.memory.fits());
}

std::optional<v1::Precision> TrainedPrecision(
    const engine::Checkpoint& checkpoint) {
  const nlohmann::json state = nlohmann::json::parse(
      checkpoint.state_json(), nullptr, /*allow_exceptions=*/false);
  const std::string trained =
      state.is_object() ? state.value("precision", "") : "";
  if (trained == "bf16") return v1::PRECISION_BF16;
  if (trained == "fp32") return v1::PRECISION_FP32;
  return std::nullopt;
}

absl::StatusOr<plan::PrecisionChoice> ApplyPrecisionFlags(bool launched_rank,
                                                          v1::JobSpec* spec) {
  const std::string flag = absl::GetFlag(FLAGS_precision);
  const std::string reason = absl::GetFlag(FLAGS_precision_reason);
  if (flag.empty()) {
    if (launched_rank && plan::IsAutoPrecision(*spec)) {
      return absl::FailedPreconditionError(
          "precision: auto reached a rank without its choice: the launcher "
          "(plateau-worker train --world, or plateaud) chooses it once for "
          "every rank and passes --precision");
    }
    return plan::PrecisionChoice{spec->precision(),
                                 reason.empty() ? "set in the spec" : reason};
  }
  v1::Precision precision = v1::PRECISION_UNSPECIFIED;
  if (flag == "bf16") precision = v1::PRECISION_BF16;
  if (flag == "fp32") precision = v1::PRECISION_FP32;
  if (precision == v1::PRECISION_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--precision: bf16 or fp32, got \"", flag, "\""));
  }
  if (!plan::IsAutoPrecision(*spec) && spec->precision() != precision) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--precision ", flag, " contradicts the spec's precision: ",
        spec->precision() == v1::PRECISION_BF16 ? "bf16" : "fp32",
        "; --precision only chooses for precision: auto"));
  }
  spec->set_precision(precision);
  return plan::PrecisionChoice{precision,
                               reason.empty() ? "--precision" : reason};
}

}  // namespace plateau::worker
