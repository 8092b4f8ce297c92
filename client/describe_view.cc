#include "client/describe_view.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/format.h"
#include "client/job_view.h"
#include "client/plan_view.h"
#include "common/byte_size.h"
#include "plan/precision_choice.h"
#include "proto/job_spec.h"

namespace plateau::client {
namespace {

// "Label:" padded so that values line up.
void AddField(std::string* out, absl::string_view label,
              absl::string_view value) {
  absl::StrAppend(
      out, absl::StrFormat("%-16s%s\n", absl::StrCat(label, ":"), value));
}

// "Label:" alone, above an indented block.
void AddHeading(std::string* out, absl::string_view label) {
  absl::StrAppend(out, label, ":\n");
}

// Every line of `text` prefixed with `spaces` spaces (empty lines kept
// empty), each ending in '\n'.
std::string Indent(absl::string_view text, int spaces) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty()) absl::StrAppend(&out, std::string(spaces, ' '), line);
    absl::StrAppend(&out, "\n");
  }
  // StrSplit yields a last empty piece after a final '\n': drop its newline.
  if (absl::EndsWith(text, "\n")) out.pop_back();
  return out;
}

std::string StateText(const v1::Job& job) {
  std::string text = StateName(job.state());
  if (job.state() != v1::JOB_STATE_QUEUED) return text;
  if (job.queue_position() > 0) {
    absl::StrAppend(&text, ", position ", job.queue_position());
  }
  if (!job.wait_reason().empty()) {
    absl::StrAppend(&text, " (", job.wait_reason(), ")");
  }
  return text;
}

void AddAllocation(const v1::Job& job, std::string* out) {
  const v1::Allocation& allocation = job.allocation();
  if (allocation.nodes().empty()) {
    AddField(out, "Allocation", "-");
    return;
  }
  AddField(out, "Allocation",
           absl::StrCat("world size ", allocation.world_size()));
  for (const v1::NodeAllocation& node : allocation.nodes()) {
    const int devices = node.device_indices_size();
    const std::string ranks =
        devices <= 1 ? absl::StrCat("rank ", node.first_rank())
                     : absl::StrCat("ranks ", node.first_rank(), "-",
                                    node.first_rank() + devices - 1);
    absl::StrAppend(out, "  ", node.node(), ": devices ",
                    absl::StrJoin(node.device_indices(), ","), "  ", ranks,
                    "\n");
  }
}

// Each run of attempts with one layout: an elastic job's attempts may
// differ in nodes and dp.
void AddLayouts(const v1::Job& job, std::string* out) {
  if (IsElastic(job.spec().resources())) {
    AddField(out, "Nodes",
             absl::StrCat(NodesText(job.spec().resources()),
                          " (elastic: each attempt takes the most that are "
                          "free)"));
  }
  if (job.attempt_layouts().empty()) return;
  AddHeading(out, "Layouts");
  std::vector<std::vector<std::string>> rows;
  for (const v1::AttemptLayout& layout : job.attempt_layouts()) {
    rows.push_back(
        {layout.first_attempt() == layout.last_attempt()
             ? absl::StrCat(layout.first_attempt())
             : absl::StrCat(layout.first_attempt(), "-", layout.last_attempt()),
         absl::StrCat(layout.nodes(), "x", layout.devices_per_node()),
         absl::StrCat("ep ", layout.ep(), " x pp ", layout.pp(), " x dp ",
                      layout.dp())});
  }
  absl::StrAppend(
      out, Indent(FormatTable({"ATTEMPTS", "NODES", "LAYOUT"}, rows), 2));
}

void AddProgress(const v1::Job& job, std::string* out) {
  const v1::JobProgress& progress = job.progress();
  AddField(out, "Progress", ProgressCell(job));
  if (progress.step() == 0 && progress.tokens_total() == 0) return;
  absl::StrAppend(out, absl::StrFormat("  loss %.4f", progress.loss()));
  if (progress.validation_loss() != 0) {
    absl::StrAppend(out, absl::StrFormat("  validation loss %.4f",
                                         progress.validation_loss()));
  }
  absl::StrAppend(out, "\n");
  absl::StrAppend(out, absl::StrFormat("  %.0f tok/s  %d tokens in total\n",
                                       progress.tokens_per_second(),
                                       progress.tokens_total()));
  if (progress.checkpoint_step() > 0) {
    absl::StrAppend(out, "  checkpoint at step ", progress.checkpoint_step(),
                    ": ", progress.checkpoint_location(), "\n");
  }
}

// Peaks per rank as a table under a capacity line; zero peaks are left out.
void AddMemory(const v1::Job& job, std::string* out) {
  if (job.memory().empty()) {
    AddField(out, "Memory peaks", "none reported");
    return;
  }
  AddHeading(out, "Memory peaks");
  for (const v1::RankMemory& rank : job.memory()) {
    absl::StrAppend(out, "  rank ", rank.rank(), " (device capacity ",
                    rank.device_capacity_bytes() > 0
                        ? FormatBytes(rank.device_capacity_bytes())
                        : "unknown",
                    "):\n");
    std::vector<v1::MemoryUsage> usages(rank.usage().begin(),
                                        rank.usage().end());
    std::stable_sort(usages.begin(), usages.end(),
                     [](const v1::MemoryUsage& a, const v1::MemoryUsage& b) {
                       if (a.pool() != b.pool()) return a.pool() < b.pool();
                       return a.peak_bytes() > b.peak_bytes();
                     });
    std::vector<std::vector<std::string>> rows;
    for (const v1::MemoryUsage& usage : usages) {
      if (usage.peak_bytes() <= 0) continue;
      rows.push_back({PoolName(usage.pool()), ComponentName(usage.component()),
                      FormatBytes(usage.peak_bytes())});
    }
    absl::StrAppend(
        out, Indent(FormatTable({"POOL", "COMPONENT", "PEAK"}, rows), 4));
  }
  if (std::optional<DevicePeak> peak = LargestDevicePeak(job)) {
    absl::StrAppend(
        out, "  largest device peak: ", ComponentName(peak->component), " ",
        FormatBytes(peak->bytes), " on rank ", peak->rank, "\n");
  }
}

// What the job's products run in, and why: precision: auto is chosen at
// the first attempt (plan/precision_choice.h) and kept.
std::string PrecisionText(const v1::Job& job) {
  const char* name =
      job.spec().precision() == v1::PRECISION_FP32 ? "fp32" : "bf16";
  if (!job.precision_reason().empty()) {
    return absl::StrCat(name, " (", job.precision_reason(), ")");
  }
  if (!plan::IsAutoPrecision(job.spec())) {
    return absl::StrCat(name, " (set in the spec)");
  }
  if (!job.has_plan()) return "auto (chosen at its first attempt)";
  return job.has_fp32_alternative()
             ? "auto (chosen at its first attempt: bf16 where its devices' "
               "bf16 products are faster, else fp32; it fits in either)"
             : "auto (chosen at its first attempt; it fits only in bf16)";
}

// The plan made at admission, when there is one.
void AddPlan(const v1::Job& job, std::string* out) {
  if (!job.has_plan()) {
    AddField(out, "Memory plan",
             "none (no node's device memory was known at submit)");
    return;
  }
  AddHeading(out, "Memory plan");
  absl::StrAppend(out, Indent(PlanSummary(job.plan()), 2));
}

void AddEvents(const std::vector<v1::JobEvent>& events, std::string* out) {
  if (events.empty()) {
    AddField(out, "History", "none");
    return;
  }
  AddHeading(out, "History");
  std::vector<std::vector<std::string>> rows;
  for (const v1::JobEvent& event : events) {
    rows.push_back({FormatTime(event.time()), EventKindName(event.kind()),
                    StateName(event.state()), absl::StrCat(event.attempt()),
                    event.message()});
  }
  absl::StrAppend(
      out,
      Indent(FormatTable({"TIME", "KIND", "STATE", "ATTEMPT", "MESSAGE"}, rows),
             2));
}

}  // namespace

std::string DescribeJob(const v1::Job& job,
                        const std::vector<v1::JobEvent>& events) {
  std::string out;
  AddField(&out, "ID", job.id());
  AddField(&out, "Name", job.spec().name());
  AddField(&out, "Owner", job.owner());
  AddField(&out, "State", StateText(job));
  AddField(&out, "Attempt",
           job.attempt() == 0
               ? "- (not scheduled yet)"
               : absl::StrCat(job.attempt(), " (", job.restarts(),
                              job.restarts() == 1 ? " restart" : " restarts",
                              job.preemptions() == 0
                                  ? ""
                                  : absl::StrCat(", ", job.preemptions(),
                                                 job.preemptions() == 1
                                                     ? " preemption"
                                                     : " preemptions"),
                              ")"));
  AddField(&out, "Precision", PrecisionText(job));
  AddField(&out, "Submitted", FormatTime(job.submit_time()));
  AddField(&out, "Started", FormatTime(job.start_time()));
  AddField(&out, "Ended", FormatTime(job.end_time()));
  AddAllocation(job, &out);
  AddLayouts(job, &out);
  AddProgress(job, &out);
  AddField(&out, "Last error",
           job.last_error().empty() ? "-" : job.last_error());
  AddPlan(job, &out);
  AddMemory(job, &out);
  AddEvents(events, &out);
  AddHeading(&out, "Spec");
  std::string yaml = job.spec_yaml();
  if (yaml.empty()) yaml = JobSpecToYaml(job.spec());
  if (!absl::EndsWith(yaml, "\n")) yaml += "\n";
  absl::StrAppend(&out, Indent(yaml, 2));
  return out;
}

}  // namespace plateau::client
