#include "client/job_view.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/format.h"
#include "common/byte_size.h"
#include "proto/job_spec.h"

namespace plateau::client {

std::optional<DevicePeak> LargestDevicePeak(const v1::Job& job) {
  std::optional<DevicePeak> largest;
  for (const v1::RankMemory& rank : job.memory()) {
    for (const v1::MemoryUsage& usage : rank.usage()) {
      if (usage.pool() != v1::MEMORY_POOL_DEVICE || usage.peak_bytes() <= 0) {
        continue;
      }
      if (!largest.has_value() || usage.peak_bytes() > largest->bytes) {
        largest =
            DevicePeak{rank.rank(), usage.component(), usage.peak_bytes()};
      }
    }
  }
  return largest;
}

int64_t TotalSteps(const v1::Job& job) {
  if (job.progress().total_steps() > 0) return job.progress().total_steps();
  return job.spec().train().steps();
}

std::string ProgressCell(const v1::Job& job) {
  const int64_t total = TotalSteps(job);
  if (total <= 0) return "-";
  const int64_t step = job.progress().step();
  return absl::StrCat(step, "/", total, " (", step * 100 / total, "%)");
}

std::string StateLine(const v1::Job& job) {
  std::string line = absl::StrCat(job.id(), " ", StateName(job.state()));
  if (job.state() == v1::JOB_STATE_QUEUED && !job.wait_reason().empty()) {
    absl::StrAppend(&line, " (", job.wait_reason(), ")");
  }
  return line;
}

std::string ProgressLine(const v1::Job& job) {
  std::string line = absl::StrCat(job.id(), " ", StateName(job.state()));
  const v1::JobProgress& progress = job.progress();
  const int64_t total = TotalSteps(job);
  if (total > 0) {
    absl::StrAppend(&line, " ",
                    ProgressBar(progress.step(), total, kProgressBarWidth), " ",
                    progress.step(), "/", total);
  }
  if (progress.step() > 0) {
    absl::StrAppend(&line, absl::StrFormat("  loss %.4f", progress.loss()));
  }
  if (progress.tokens_per_second() > 0) {
    absl::StrAppend(
        &line, absl::StrFormat("  %.0f tok/s", progress.tokens_per_second()));
  }
  if (std::optional<DevicePeak> peak = LargestDevicePeak(job)) {
    absl::StrAppend(&line, "  peak ", FormatBytes(peak->bytes), " (",
                    ComponentName(peak->component), ")");
  }
  if (job.state() == v1::JOB_STATE_QUEUED && !job.wait_reason().empty()) {
    absl::StrAppend(&line, "  (", job.wait_reason(), ")");
  }
  return line;
}

std::string FinalLine(const v1::Job& job) {
  std::string line = ProgressLine(job);
  if (!job.last_error().empty()) {
    absl::StrAppend(&line, "  error: ", job.last_error());
  }
  return line;
}

std::string EventLine(const v1::JobEvent& event) {
  std::string line = absl::StrCat("[", FormatTime(event.time()), "] EVENT ",
                                  EventKindName(event.kind()));
  if (!event.message().empty()) absl::StrAppend(&line, ": ", event.message());
  return line;
}

std::string WorkerLine(const v1::WorkerLogLine& line) {
  absl::string_view text = line.text();
  absl::ConsumeSuffix(&text, "\n");
  absl::ConsumeSuffix(&text, "\r");
  return absl::StrCat("[", line.node(), " rank ", line.rank(), "] ", text);
}

std::string JobsTable(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                      absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(jobs.size());
  for (const v1::Job& job : jobs) {
    rows.push_back({job.id(), job.spec().name(), job.owner(),
                    StateName(job.state()), ProgressCell(job),
                    AgeSince(job.submit_time(), now)});
  }
  return FormatTable({"ID", "NAME", "OWNER", "STATE", "PROGRESS", "AGE"}, rows);
}

void SortByQueuePosition(google::protobuf::RepeatedPtrField<v1::Job>* jobs) {
  std::sort(jobs->begin(), jobs->end(), [](const v1::Job& a, const v1::Job& b) {
    // Without a place (0): after every placed job, oldest first (ids are
    // random).
    const auto key = [](const v1::Job& job) {
      return std::make_tuple(
          job.queue_position() == 0 ? INT32_MAX : job.queue_position(),
          job.submit_time().seconds(), job.submit_time().nanos(), job.id());
    };
    return key(a) < key(b);
  });
}

std::string QueueTable(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                       absl::Time now) {
  google::protobuf::RepeatedPtrField<v1::Job> queued;
  for (const v1::Job& job : jobs) {
    if (job.state() == v1::JOB_STATE_QUEUED) *queued.Add() = job;
  }
  SortByQueuePosition(&queued);
  std::vector<std::vector<std::string>> rows;
  rows.reserve(queued.size());
  for (const v1::Job& job : queued) {
    const v1::Resources& resources = job.spec().resources();
    rows.push_back(
        {job.queue_position() > 0 ? absl::StrCat(job.queue_position()) : "-",
         job.id(), job.spec().name(), job.owner(),
         absl::StrCat(job.spec().priority()),
         absl::StrCat(NodesText(resources), "x", resources.devices_per_node()),
         AgeSince(job.has_queue_time() ? job.queue_time() : job.submit_time(),
                  now),
         job.wait_reason().empty() ? "-" : job.wait_reason()});
  }
  return FormatTable(
      {"POS", "ID", "NAME", "OWNER", "PRIORITY", "DEVICES", "WAITING", "WHY"},
      rows);
}

}  // namespace plateau::client
