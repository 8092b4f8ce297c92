// `plateau ls`, `plateau queue`, `plateau describe JOB` and `plateau cancel
// JOB`.
#include <iostream>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/commands.h"
#include "client/describe_view.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/job_view.h"
#include "client/streams.h"
#include "common/status_macros.h"

namespace plateau::client {
namespace {

constexpr int kPageSize = 100;

absl::Status PrintJson(const google::protobuf::Message& message) {
  ASSIGN_OR_RETURN(const std::string json, ToJson(message));
  std::cout << json;
  return absl::OkStatus();
}

// Every page of ListJobs for `request`, in one response.
absl::StatusOr<v1::ListJobsResponse> ListAll(Connection& connection,
                                             v1::ListJobsRequest request) {
  v1::ListJobsResponse all;
  request.set_page_size(kPageSize);
  std::set<std::string> tokens_seen;  // guards against a token that repeats
  while (true) {
    v1::ListJobsResponse page;
    const grpc::Status status = connection.stub().ListJobs(
        connection.NewContext().get(), request, &page);
    if (!status.ok()) return connection.Error(status);
    for (v1::Job& job : *page.mutable_jobs()) {
      *all.add_jobs() = std::move(job);
    }
    if (page.next_page_token().empty() ||
        !tokens_seen.insert(page.next_page_token()).second) {
      break;
    }
    request.set_page_token(page.next_page_token());
  }
  return all;
}

}  // namespace

absl::StatusOr<int> RunList(Connection& connection,
                            const CommandOptions& options) {
  ASSIGN_OR_RETURN(const v1::ListJobsResponse all,
                   ListAll(connection, v1::ListJobsRequest()));
  if (options.output == OutputFormat::kJson) {
    RETURN_IF_ERROR(PrintJson(all));
  } else {
    std::cout << TerminalSafe(JobsTable(all.jobs(), absl::Now()));
  }
  return kExitOk;
}

absl::StatusOr<int> RunQueue(Connection& connection,
                             const CommandOptions& options) {
  v1::ListJobsRequest request;
  request.add_states(v1::JOB_STATE_QUEUED);
  ASSIGN_OR_RETURN(v1::ListJobsResponse queued, ListAll(connection, request));
  if (options.output == OutputFormat::kJson) {
    SortByQueuePosition(queued.mutable_jobs());
    RETURN_IF_ERROR(PrintJson(queued));
  } else {
    std::cout << TerminalSafe(QueueTable(queued.jobs(), absl::Now()));
  }
  return kExitOk;
}

absl::StatusOr<int> RunDescribe(Connection& connection,
                                const CommandOptions& options,
                                const std::string& job_id) {
  ASSIGN_OR_RETURN(const v1::Job job, FetchJob(connection, job_id));
  if (options.output == OutputFormat::kJson) {
    RETURN_IF_ERROR(PrintJson(job));
    return kExitOk;
  }
  std::vector<v1::JobEvent> events;
  RETURN_IF_ERROR(StreamLogEntries(connection, job_id, /*follow=*/false,
                                   [&events](const v1::LogEntry& entry) {
                                     if (entry.has_event()) {
                                       events.push_back(entry.event());
                                     }
                                   }));
  std::cout << TerminalSafe(DescribeJob(job, events));
  return kExitOk;
}

absl::StatusOr<int> RunCancel(Connection& connection,
                              const CommandOptions& /*options*/,
                              const std::string& job_id,
                              const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  const grpc::Status status =
      connection.stub().CancelJob(connection.NewContext().get(), request, &job);
  if (!status.ok()) return JobError(connection.Error(status), job_id);
  std::cout << job.id() << " " << StateName(job.state()) << "\n";
  return kExitOk;
}

}  // namespace plateau::client
