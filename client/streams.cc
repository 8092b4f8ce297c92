#include "client/streams.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/format.h"
#include "grpcpp/support/sync_stream.h"

namespace plateau::client {
namespace {

// Whether a stream that ended with `status` before its natural end should
// be reopened: only when plateaud went away after the stream had worked.
bool ShouldReconnect(const grpc::Status& status, bool delivered_before,
                     int* reconnects) {
  if (!delivered_before) return false;
  if (!status.ok() && status.error_code() != grpc::StatusCode::UNAVAILABLE) {
    return false;
  }
  return ++*reconnects <= kMaxReconnects;
}

}  // namespace

absl::StatusOr<v1::Job> FollowJob(Connection& connection,
                                  const std::string& job_id,
                                  ProgressPrinter& printer,
                                  CallCanceller* canceller) {
  std::optional<v1::Job> last;
  int reconnects = 0;
  while (true) {
    std::unique_ptr<grpc::ClientContext> context =
        connection.NewContext(std::nullopt);
    if (canceller != nullptr) canceller->Register(context.get());
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    std::unique_ptr<grpc::ClientReader<v1::WatchJobResponse>> reader =
        connection.stub().WatchJob(context.get(), request);
    v1::WatchJobResponse response;
    // plateaud closes the stream after the final state.
    while (reader->Read(&response)) {
      reconnects = 0;
      if (response.has_event()) printer.Event(response.event());
      printer.Update(response.job());
      last = response.job();
    }
    const grpc::Status status = reader->Finish();
    if (canceller != nullptr) canceller->Unregister();
    if (last.has_value() && IsFinalState(last->state())) return *last;
    if (canceller != nullptr && canceller->cancelled()) {
      return absl::CancelledError(absl::StrCat("stopped watching ", job_id));
    }
    if (!ShouldReconnect(status, last.has_value(), &reconnects)) {
      if (status.ok()) {
        return absl::UnavailableError(absl::StrCat(
            "plateaud ended the watch of ", job_id, " before the job ended"));
      }
      return JobError(connection.Error(status), job_id);
    }
    absl::SleepFor(kReconnectDelay);
  }
}

absl::Status StreamLogEntries(
    Connection& connection, const std::string& job_id, bool follow,
    const std::function<void(const v1::LogEntry&)>& on_entry) {
  int64_t after_sequence = 0;
  bool delivered = false;
  int reconnects = 0;
  while (true) {
    std::unique_ptr<grpc::ClientContext> context = connection.NewContext(
        follow ? std::nullopt : std::optional(kCallTimeout));
    v1::StreamLogsRequest request;
    request.set_job_id(job_id);
    request.set_follow(follow);
    request.set_after_sequence(after_sequence);
    std::unique_ptr<grpc::ClientReader<v1::LogEntry>> reader =
        connection.stub().StreamLogs(context.get(), request);
    v1::LogEntry entry;
    while (reader->Read(&entry)) {
      delivered = true;
      reconnects = 0;
      after_sequence = entry.sequence();
      on_entry(entry);
    }
    const grpc::Status status = reader->Finish();
    // Without follow, or with it once the job has ended, plateaud closes
    // the stream normally.
    if (status.ok()) return absl::OkStatus();
    if (!follow || !ShouldReconnect(status, delivered, &reconnects)) {
      return JobError(connection.Error(status), job_id);
    }
    absl::SleepFor(kReconnectDelay);
  }
}

}  // namespace plateau::client
