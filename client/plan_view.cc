#include "client/plan_view.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "client/format.h"
#include "common/byte_size.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "proto/job_spec.h"

namespace plateau::client {
namespace {

// The device pool's peak of `component` on `rank` (0 without a rank).
int64_t DevicePeakOf(const v1::RankPrediction* rank,
                     v1::MemoryComponent component) {
  if (rank == nullptr) return 0;
  int64_t bytes = 0;
  for (const v1::PredictedPeak& peak : rank->peaks()) {
    if (peak.pool() == v1::MEMORY_POOL_DEVICE &&
        peak.component() == component) {
      bytes += peak.peak_bytes();
    }
  }
  return bytes;
}

// "37.5%" of the device; "-" when its size is unknown.
std::string Share(int64_t bytes, int64_t device_bytes) {
  if (device_bytes <= 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(bytes) /
                                       static_cast<double>(device_bytes));
}

// "5%", "2.5%".
std::string Percent(double fraction) {
  return absl::StrFormat("%g%%", fraction * 100.0);
}

// "dispatch (at backward, layer 1)"; the phase left out when unknown.
std::string Binding(const v1::MemoryPrediction& prediction) {
  std::string text = ComponentName(prediction.binding_component());
  if (!prediction.peak_phase().empty()) {
    absl::StrAppend(&text, " (at ", prediction.peak_phase(), ")");
  }
  return text;
}

std::string SchedulesLine(const v1::MemoryPlan& plan) {
  const std::string& schedules = plan.planned().schedules();
  return absl::StrCat(
      plan.precision().empty()
          ? ""
          : absl::StrCat("precision: ",
                         PrecisionDescription(plan.precision(),
                                              plan.bf16_weight_storage(),
                                              plan.bf16_gradients()),
                         plan.precision_reason().empty()
                             ? ""
                             : absl::StrCat(" (", plan.precision_reason(), ")"),
                         "\n"),
      "schedules: ", schedules.empty() ? "none" : schedules,
      plan.schedules_chosen() ? " (chosen by the planner)" : "", "\n");
}

// One row per component of the device pool, then the pools' peaks.
std::string ComponentTable(const v1::MemoryPlan& plan) {
  const int64_t device = plan.device_memory_bytes();
  const v1::RankPrediction* baseline = plan::WorstRank(plan.baseline());
  const v1::RankPrediction* planned = plan::WorstRank(plan.planned());
  std::vector<std::vector<std::string>> rows;
  for (int number = v1::MEMORY_COMPONENT_WEIGHTS;
       number <= v1::MEMORY_COMPONENT_OTHER; ++number) {
    const auto component = static_cast<v1::MemoryComponent>(number);
    const int64_t before = DevicePeakOf(baseline, component);
    const int64_t after = DevicePeakOf(planned, component);
    rows.push_back({ComponentName(component), FormatBytes(before),
                    Share(before, device), FormatBytes(after),
                    Share(after, device)});
  }
  const int64_t before = plan.baseline().device_peak_bytes();
  const int64_t after = plan.planned().device_peak_bytes();
  rows.push_back({"device peak", FormatBytes(before), Share(before, device),
                  FormatBytes(after), Share(after, device)});
  rows.push_back({"host peak", FormatBytes(plan.baseline().host_peak_bytes()),
                  "-", FormatBytes(plan.planned().host_peak_bytes()), "-"});
  return absl::StrCat(
      "device memory of the worst rank (baseline: rank ",
      plan.baseline().worst_rank(), ", planned: rank ",
      plan.planned().worst_rank(), "):\n",
      FormatTable({"COMPONENT", "BASELINE", "SHARE", "PLANNED", "SHARE"},
                  rows));
}

// "4096 (baseline 1024)"; "none fits" for 0.
std::string Reach(int64_t planned, int64_t baseline) {
  auto value = [](int64_t n) {
    return n > 0 ? absl::StrCat(n) : std::string("none fits");
  };
  return absl::StrCat(value(planned), " (baseline ", value(baseline), ")");
}

// What the plan assumed of the router.
std::string RoutingText(const v1::MemoryPlan& plan) {
  if (plan.routing_skew() == 0.0) {
    return "worst-case routing (every token on the same experts)";
  }
  return absl::StrFormat("routing skew %g", plan.routing_skew());
}

}  // namespace

std::string FitsLine(const v1::MemoryPlan& plan) {
  const std::string peak = FormatBytes(plan.planned().device_peak_bytes());
  const int64_t usable_bytes =
      plan::UsableBytes(plan.device_memory_bytes(), plan.margin());
  const std::string usable = FormatBytes(usable_bytes);
  if (plan.fits()) {
    return absl::StrCat("fits: yes, planned peak ", peak, " of ", usable,
                        " usable");
  }
  if (plan.min_nodes() > 0 &&
      plan.planned().device_peak_bytes() <= usable_bytes) {
    return absl::StrCat(
        "fits: no, at resources.min_nodes ", plan.min_nodes(),
        " the planned peak ", FormatBytes(plan.min_nodes_device_peak_bytes()),
        " exceeds ", usable, " usable (at resources.nodes: ", peak, ")");
  }
  return absl::StrCat("fits: no, planned peak ", peak, " exceeds ", usable,
                      " usable (", Percent(1.0 - plan.margin()), " of ",
                      FormatBytes(plan.device_memory_bytes()), ")");
}

// An elastic plan's other end: where each rank holds the most.
std::string ElasticLine(const v1::MemoryPlan& plan) {
  if (plan.min_nodes() <= 0) return "";
  return absl::StrCat("elastic: at resources.min_nodes ", plan.min_nodes(),
                      ", planned peak ",
                      FormatBytes(plan.min_nodes_device_peak_bytes()),
                      ", host memory of a node up to ",
                      FormatBytes(plan.min_nodes_node_host_bytes()), "\n");
}

// A checkpoint's write time on a node, and a warning when a stop (the
// write in flight, then the stop's own) would outlast plateaud's grace.
std::string CheckpointLines(const v1::MemoryPlan& plan) {
  if (plan.checkpoint_write_bytes_per_second() <= 0) return "";
  const double seconds = plan.node_checkpoint_write_seconds();
  std::string out = absl::StrFormat(
      "checkpoint write: up to %s a node, about %.1f s at %s/s\n",
      FormatBytes(plan.node_checkpoint_bytes()), seconds,
      FormatBytes(
          static_cast<int64_t>(plan.checkpoint_write_bytes_per_second())));
  const double stop_seconds = plan.stop_checkpoint_write_seconds();
  if (plan.stop_grace_seconds() > 0 &&
      stop_seconds > plan.stop_grace_seconds()) {
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "warning: a stop or preemption writes checkpoints for up to "
            "%.1f s (%s), but plateaud's --stop_grace_period is %.0f s: the "
            "stop may be cut short and lose the steps since the last "
            "complete checkpoint; raise --stop_grace_period (or "
            "--checkpoint_write_bytes_per_second, if the nodes write "
            "faster)\n",
            stop_seconds,
            stop_seconds > seconds ? "the write in flight, then its own"
                                   : "its own",
            plan.stop_grace_seconds()));
  }
  return out;
}

std::string PlanReport(absl::string_view job_name, const v1::MemoryPlan& plan) {
  std::string out =
      absl::StrCat("plan for ", job_name, ": ", plan.devices(),
                   plan.devices() == 1 ? " device" : " devices", " of ",
                   FormatBytes(plan.device_memory_bytes()), ", margin ",
                   Percent(plan.margin()), ", ", RoutingText(plan), "\n");
  absl::StrAppend(&out, SchedulesLine(plan), "\n", ComponentTable(plan), "\n");
  absl::StrAppend(&out, "binds first (baseline): ", Binding(plan.baseline()),
                  "\n");
  absl::StrAppend(&out, "binds first (planned):  ", Binding(plan.planned()),
                  "\n");
  absl::StrAppend(&out, FitsLine(plan), "\n");
  if (!plan.fits() && !plan.explanation().empty()) {
    absl::StrAppend(&out, plan.explanation(), "\n");
  }
  absl::StrAppend(&out, "host memory of rank 0's node: up to ",
                  FormatBytes(plan.node_host_bytes()), "\n");
  absl::StrAppend(&out, ElasticLine(plan), CheckpointLines(plan));
  absl::StrAppend(
      &out, "max seq_len:      ",
      Reach(plan.max_seq_len(), plan.baseline_max_seq_len()), "\n",
      "max batch_tokens: ",
      Reach(plan.max_batch_tokens(), plan.baseline_max_batch_tokens()), "\n");
  return out;
}

std::string PlanSummary(const v1::MemoryPlan& plan) {
  std::string out =
      absl::StrCat(FitsLine(plan), " (", plan.devices(),
                   plan.devices() == 1 ? " device" : " devices", " of ",
                   FormatBytes(plan.device_memory_bytes()), ")\n");
  if (!plan.fits() && !plan.explanation().empty()) {
    absl::StrAppend(&out, plan.explanation(), "\n");
  }
  absl::StrAppend(&out, ElasticLine(plan),
                  "binds first: ", Binding(plan.planned()), "\n",
                  SchedulesLine(plan), ComponentTable(plan));
  return out;
}

absl::StatusOr<std::string> PlanJson(const v1::MemoryPlan& plan,
                                     const v1::ScheduleSpec& schedules) {
  absl::StatusOr<std::string> plan_json = ToJson(plan);
  if (!plan_json.ok()) return plan_json.status();
  absl::StatusOr<std::string> schedules_json = ToJson(schedules);
  if (!schedules_json.ok()) return schedules_json.status();
  // Both objects one level deeper, in field order (a Struct would lose it),
  // indented as protobuf indents (one space a level).
  auto nested = [](absl::string_view json) {
    return absl::StrReplaceAll(absl::StripTrailingAsciiWhitespace(json),
                               {{"\n", "\n "}});
  };
  return absl::StrCat("{\n \"plan\": ", nested(*plan_json),
                      ",\n \"schedules\": ", nested(*schedules_json), "\n}\n");
}

}  // namespace plateau::client
