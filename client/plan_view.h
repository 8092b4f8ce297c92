// What the CLI shows of a job's memory plan (plan.proto): for `plateau plan`
// the whole report, for `plateau describe` a compact one. Both hold the
// device pool's peak of every component (docs/ARCHITECTURE.md section 5) on
// each prediction's worst rank, without schedules ("baseline") and with the
// planned ones, each with its share of the device. Pure; text ends in '\n'.
#ifndef PLATEAU_CLIENT_PLAN_VIEW_H_
#define PLATEAU_CLIENT_PLAN_VIEW_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace plateau::client {

// The `plateau plan` report of job `job_name`:
//   a header (job, devices, device memory, margin, the routing assumed),
//   the planned schedules ("(chosen by the planner)" when they were),
//   the component table (COMPONENT, BASELINE, SHARE, PLANNED, SHARE) with
//   the device pool's and the host pool's peaks as its last rows,
//   "binds first" for the baseline and the planned step,
//   "fits: yes|no, ..." and, when it does not fit, the plan's explanation,
//   the largest seq_len and batch_tokens that fit, planned vs baseline.
std::string PlanReport(absl::string_view job_name, const v1::MemoryPlan& plan);

// For `plateau describe`: the fits line, what binds first, the planned
// schedules and the component table.
std::string PlanSummary(const v1::MemoryPlan& plan);

// "fits: yes, planned peak 1.20 GiB of 1.90 GiB usable" or
// "fits: no, planned peak 3.10 GiB exceeds 1.90 GiB usable (95% of
// 2.00 GiB)". No newline.
std::string FitsLine(const v1::MemoryPlan& plan);

// {"plan": <plan>, "schedules": <schedules>} as pretty-printed protobuf JSON
// (proto field names, defaults included), ending in '\n'. INTERNAL if
// protobuf refuses a message.
absl::StatusOr<std::string> PlanJson(const v1::MemoryPlan& plan,
                                     const v1::ScheduleSpec& schedules);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_PLAN_VIEW_H_
