// `plateau logs [-f] JOB`. With -f on a terminal a second thread watches the
// job and keeps its progress line redrawn below the log lines; both print
// through one ProgressPrinter, which keeps the output whole.
#include <iostream>
#include <optional>
#include <thread>

#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/job_view.h"
#include "client/progress_printer.h"
#include "client/streams.h"

namespace plateau::client {
namespace {

std::string EntryLine(const v1::LogEntry& entry) {
  if (entry.has_event()) return EventLine(entry.event());
  return WorkerLine(entry.line());
}

}  // namespace

absl::StatusOr<int> RunLogs(Connection& connection,
                            const CommandOptions& options,
                            const std::string& job_id, bool follow) {
  const bool live = follow && options.terminal;
  ProgressPrinter::Options printing;
  printing.terminal = live;
  printing.width = options.terminal_width;
  printing.print_events = false;  // the log has them
  ProgressPrinter printer(std::cout, printing);

  CallCanceller canceller;
  std::optional<absl::StatusOr<v1::Job>> watched;
  std::thread watcher;
  if (live) {
    watcher =
        std::thread([&connection, &job_id, &printer, &canceller, &watched] {
          watched = FollowJob(connection, job_id, printer, &canceller);
        });
  }
  const absl::Status streamed = StreamLogEntries(
      connection, job_id, follow, [&printer](const v1::LogEntry& entry) {
        printer.Line(EntryLine(entry));
      });
  if (watcher.joinable()) {
    if (!streamed.ok()) canceller.Cancel();
    watcher.join();
  }
  if (!streamed.ok()) return streamed;
  if (!follow) return kExitOk;

  absl::StatusOr<v1::Job> job = (watched.has_value() && watched->ok())
                                    ? **watched
                                    : FetchJob(connection, job_id);
  if (!job.ok()) return job.status();
  if (live) printer.Finish(*job);
  return ExitCodeForJob(job->state());
}

}  // namespace plateau::client
