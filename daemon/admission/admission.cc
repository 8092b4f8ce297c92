#include "daemon/admission/admission.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "plan/precision_choice.h"
#include "proto/job_spec.h"

namespace plateau::daemon {

namespace {

// The smallest device on which `peak` fits with the plan's margin kept free.
int64_t RequiredBytesForPeak(const v1::MemoryPlan& plan, int64_t peak) {
  if (peak <= 0) return 0;
  const double keep = 1.0 - std::clamp(plan.margin(), 0.0, 0.99);
  // The planner's test: a device of `bytes` fits when peak <=
  // UsableBytes(bytes). The smallest such size: its floating-point
  // estimate, corrected by a byte or two either way.
  auto fits = [&plan, peak](int64_t bytes) {
    return plan::UsableBytes(bytes, plan.margin()) >= peak;
  };
  int64_t bytes =
      static_cast<int64_t>(std::ceil(static_cast<double>(peak) / keep));
  while (!fits(bytes)) ++bytes;
  while (bytes > 1 && fits(bytes - 1)) --bytes;
  return bytes;
}

}  // namespace

int64_t RequiredDeviceMemoryBytes(const v1::MemoryPlan& plan) {
  return RequiredBytesForPeak(plan, plan.planned().device_peak_bytes());
}

int64_t MinNodesRequiredDeviceMemoryBytes(const v1::MemoryPlan& plan) {
  if (plan.min_nodes() <= 0) return RequiredDeviceMemoryBytes(plan);
  return RequiredBytesForPeak(plan, plan.min_nodes_device_peak_bytes());
}

namespace {

// Keeps of `prediction` what `describe` shows: the worst rank's nonzero
// peaks. The record is rewritten with every change of the job, and the
// whole layout is tens of kilobytes for a wide job; even the worst rank's
// full breakdown cost a fifth of plateaud's submits a second.
void KeepWorstRanks(v1::MemoryPrediction* prediction) {
  auto* ranks = prediction->mutable_ranks();
  for (int i = 0; i < ranks->size(); ++i) {
    if (ranks->Get(i).rank() != prediction->worst_rank()) continue;
    if (i != 0) ranks->SwapElements(0, i);
    ranks->DeleteSubrange(1, ranks->size() - 1);
    v1::RankPrediction& worst = *ranks->Mutable(0);
    worst.clear_device_at_peak();
    auto* peaks = worst.mutable_peaks();
    peaks->erase(std::remove_if(peaks->begin(), peaks->end(),
                                [](const v1::PredictedPeak& peak) {
                                  return peak.peak_bytes() == 0;
                                }),
                 peaks->end());
    return;
  }
}

// The spec planned for `options`: FAILED_PRECONDITION, explained, when it
// does not fit the devices or rank 0's node's host memory.
absl::StatusOr<plan::JobPlan> PlanFitting(const v1::JobSpec& spec,
                                          const plan::PlanOptions& options,
                                          const AdmissionDevices& devices,
                                          const Planner& planner) {
  absl::StatusOr<plan::JobPlan> planned = planner(spec, options);
  if (!planned.ok()) {
    return absl::Status(planned.status().code(),
                        absl::StrCat("planning the job's memory: ",
                                     planned.status().message()));
  }
  if (!planned->memory.fits()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job does not fit its devices: ", planned->memory.explanation()));
  }
  // An elastic job's node holds the most at min_nodes.
  const int64_t host_bytes =
      std::max(planned->memory.node_host_bytes(),
               planned->memory.min_nodes_node_host_bytes());
  if (devices.host_memory_bytes > 0 && host_bytes > devices.host_memory_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job does not fit its nodes' host memory: the ranks of a node "
        "(their offloaded state, staging and checkpoint snapshots) need up "
        "to ",
        FormatBytes(host_bytes),
        host_bytes > planned->memory.node_host_bytes()
            ? absl::StrCat(" at resources.min_nodes ",
                           planned->memory.min_nodes())
            : "",
        "; the largest node with ", spec.resources().devices_per_node(),
        " devices has ", FormatBytes(devices.host_memory_bytes),
        ". Use fewer devices per node, or nodes with more memory"));
  }
  return planned;
}

}  // namespace

absl::StatusOr<std::vector<NodeShape>> ParseNodeShapes(absl::string_view text) {
  std::vector<NodeShape> shapes;
  if (absl::StripAsciiWhitespace(text).empty()) return shapes;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t times = entry.find('x');
    NodeShape shape;
    absl::StatusOr<int64_t> memory =
        times == absl::string_view::npos
            ? absl::InvalidArgumentError("no 'x'")
            : ParseByteSize(entry.substr(times + 1));
    if (!memory.ok() || *memory <= 0 ||
        !absl::SimpleAtoi(entry.substr(0, times), &shape.devices) ||
        shape.devices < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node shape '", entry,
          "' is not DEVICESxMEMORY with both positive, e.g. 8x80GiB"));
    }
    shape.device_memory_bytes = *memory;
    shapes.push_back(shape);
  }
  return shapes;
}

std::string DescribeNodeShapes(const std::vector<NodeShape>& shapes) {
  return absl::StrJoin(
      shapes, ", ", [](std::string* out, const NodeShape& shape) {
        absl::StrAppend(out, shape.devices, " x ",
                        FormatBytes(shape.device_memory_bytes));
      });
}

absl::StatusOr<int64_t> AdmissionDeviceMemoryBytes(
    const v1::JobSpec& spec, const AdmissionDevices& devices) {
  if (devices.declared_shapes.empty()) return devices.device_memory_bytes;
  const int devices_per_node = spec.resources().devices_per_node();
  int64_t declared_bytes = 0;
  int most_devices = 0;
  for (const NodeShape& shape : devices.declared_shapes) {
    most_devices = std::max(most_devices, shape.devices);
    if (shape.devices >= devices_per_node) {
      declared_bytes = std::max(declared_bytes, shape.device_memory_bytes);
    }
  }
  if (declared_bytes == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resources.devices_per_node: ", devices_per_node,
        " devices on one node, but no node of the cluster's declared "
        "shapes (",
        DescribeNodeShapes(devices.declared_shapes),
        ") has that many; use at most ", most_devices));
  }
  return std::max(devices.device_memory_bytes, declared_bytes);
}

absl::StatusOr<AdmittedJob> AdmitJob(const v1::JobSpec& spec,
                                     const std::string& spec_yaml,
                                     const AdmissionDevices& devices,
                                     const Planner& planner) {
  AdmittedJob admitted{spec, spec_yaml, std::nullopt, std::nullopt};
  const absl::StatusOr<int64_t> device_memory_bytes =
      AdmissionDeviceMemoryBytes(spec, devices);
  if (!device_memory_bytes.ok()) return device_memory_bytes.status();
  if (*device_memory_bytes <= 0) {
    if (!spec.schedules().auto_()) return admitted;
    if (!devices.any_node) {
      return absl::FailedPreconditionError(
          "schedules: auto needs a node's device memory to plan for; attach "
          "a worker first or pin the schedules");
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "schedules: auto needs a node's device memory to plan for, and no "
        "node with ",
        spec.resources().devices_per_node(),
        " devices reports it; attach such a worker first or pin the "
        "schedules"));
  }
  plan::PlanOptions options;
  options.device_memory_bytes = *device_memory_bytes;
  options.search_reach = false;  // admission asks only whether it fits
  ASSIGN_OR_RETURN(plan::JobPlan planned,
                   PlanFitting(spec, options, devices, planner));
  // Only auto changes the spec (the chosen schedules set): then its YAML
  // is the planned spec's, so that `describe` shows what runs.
  const auto planned_yaml = [&](const v1::JobSpec& planned_spec) {
    return spec.schedules().auto_() ? JobSpecToYaml(planned_spec) : spec_yaml;
  };
  admitted.spec_yaml = planned_yaml(planned.spec);
  admitted.spec = std::move(planned.spec);
  admitted.plan = std::move(planned.memory);
  if (plan::IsAutoPrecision(spec)) {
    admitted.plan->set_precision_reason(
        "auto, planned in bf16, its least memory, until its first attempt "
        "chooses");
    v1::JobSpec fp32 = spec;
    fp32.set_precision(v1::PRECISION_FP32);
    absl::StatusOr<plan::JobPlan> fp32_planned =
        PlanFitting(fp32, options, devices, planner);
    if (fp32_planned.ok()) {
      v1::PlannedSpec& alternative = admitted.fp32_alternative.emplace();
      *alternative.mutable_spec_yaml() = planned_yaml(fp32_planned->spec);
      *alternative.mutable_spec() = std::move(fp32_planned->spec);
      *alternative.mutable_plan() = std::move(fp32_planned->memory);
      alternative.mutable_plan()->set_precision_reason(
          "auto, planned in fp32 for a first attempt that chooses it");
      KeepWorstRanks(alternative.mutable_plan()->mutable_baseline());
      KeepWorstRanks(alternative.mutable_plan()->mutable_planned());
    } else if (!absl::IsFailedPrecondition(fp32_planned.status())) {
      return fp32_planned.status();
    }
  }
  KeepWorstRanks(admitted.plan->mutable_baseline());
  KeepWorstRanks(admitted.plan->mutable_planned());
  return admitted;
}

absl::StatusOr<plan::JobPlan> PlanCache::Plan(const v1::JobSpec& spec,
                                              const plan::PlanOptions& options,
                                              const Planner& planner) {
  // JobSpec has no maps, so its serialization is canonical.
  // The worst routing keys as "worst", a stated skew as its value.
  const std::string key = absl::StrCat(
      absl::StrFormat("%d/%d/%s/%.17g/%d/", options.device_memory_bytes,
                      options.devices,
                      options.routing_skew.has_value()
                          ? absl::StrFormat("%.17g", *options.routing_skew)
                          : "worst",
                      options.margin, options.search_reach),
      spec.SerializeAsString());
  {
    absl::MutexLock lock(&mutex_);
    auto found = plans_.find(key);
    if (found != plans_.end()) return found->second;
  }
  absl::StatusOr<plan::JobPlan> planned = planner(spec, options);
  if (!planned.ok()) return planned;
  KeepWorstRanks(planned->memory.mutable_baseline());
  KeepWorstRanks(planned->memory.mutable_planned());
  if (capacity_ == 0) return planned;
  absl::MutexLock lock(&mutex_);
  if (plans_.emplace(key, *planned).second) {
    order_.push_back(key);
    if (order_.size() > capacity_) {
      plans_.erase(order_.front());
      order_.pop_front();
    }
  }
  return planned;
}

}  // namespace plateau::daemon
