// What the CLI shows of jobs in lines and tables: the `ls` table, log and
// event lines, and the watcher's progress and state lines. Pure functions of
// the messages (callers pass "now" where an age is wanted); a table ends in
// '\n', a single line has none.
#ifndef PLATEAU_CLIENT_JOB_VIEW_H_
#define PLATEAU_CLIENT_JOB_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "google/protobuf/repeated_field.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/memory.pb.h"

namespace plateau::client {

// Cells of the progress bar in ProgressLine.
inline constexpr int kProgressBarWidth = 20;

// One (rank, component) peak of the device pool.
struct DevicePeak {
  int32_t rank = 0;
  v1::MemoryComponent component = v1::MEMORY_COMPONENT_UNSPECIFIED;
  int64_t bytes = 0;
};

// The largest device-pool peak_bytes over every rank and component of
// job.memory (the first one on ties); nullopt when no rank reported a
// non-zero device peak.
std::optional<DevicePeak> LargestDevicePeak(const v1::Job& job);

// progress.total_steps, or the spec's train.steps before the job reports.
int64_t TotalSteps(const v1::Job& job);

// "120/300 (40%)"; "-" when the total is unknown.
std::string ProgressCell(const v1::Job& job);

// "j-3d8v1k6m9q2x7 RUNNING [########............] 120/300  loss 4.2130
// 1843 tok/s  peak 155.00 MiB (dispatch)": parts without data are left out;
// a QUEUED job ends with its wait reason in parentheses.
std::string ProgressLine(const v1::Job& job);

// "j-3d8v1k6m9q2x7 QUEUED (behind job j-6k1v9q3m8x2d4)", "j-3d8v1k6m9q2x7
// RUNNING".
std::string StateLine(const v1::Job& job);

// ProgressLine, then "  error: <last_error>" when there is one.
std::string FinalLine(const v1::Job& job);

// "[2026-11-29 17:03:12Z] EVENT SCHEDULED: <message>".
std::string EventLine(const v1::JobEvent& event);

// "[node-a rank 1] <text>" (a trailing newline of the text dropped).
std::string WorkerLine(const v1::WorkerLogLine& line);

// Columns ID, NAME, OWNER, STATE, PROGRESS, AGE (since submit).
std::string JobsTable(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                      absl::Time now);

// The queued jobs in `jobs`, by queue_position (those without one last, by
// id): columns POS, ID, NAME, OWNER, PRIORITY, DEVICES (nodes x devices per
// node), WAITING (since last queued) and WHY (the wait reason).
std::string QueueTable(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                       absl::Time now);

// The order of QueueTable, in place: by queue position, then (for jobs
// without one) by submit time.
void SortByQueuePosition(google::protobuf::RepeatedPtrField<v1::Job>* jobs);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_JOB_VIEW_H_
