// The verbs of the plateau CLI (docs/ARCHITECTURE.md section 6). Each prints
// its result on stdout and returns the process's exit status (exit_codes.h:
// kExitOk, or a followed job's status), or an error that the caller prints
// as "plateau: <message>" and exits 1 for. A verb that has already printed
// its own error lines (an invalid spec) returns kExitError.
#ifndef PLATEAU_CLIENT_COMMANDS_H_
#define PLATEAU_CLIENT_COMMANDS_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "plan/planner.h"

namespace plateau::client {

enum class OutputFormat { kTable, kJson };

struct CommandOptions {
  OutputFormat output = OutputFormat::kTable;
  // stdout is a terminal: progress redraws one live line.
  bool terminal = false;
  // Its width in columns (0: unknown).
  int terminal_width = 0;
};

// Validates the spec file locally, submits it and prints
// "submitted <id> (<name>)"; with `watch` then follows the job.
absl::StatusOr<int> RunSubmit(Connection& connection,
                              const CommandOptions& options,
                              const std::string& spec_path, bool watch);

// Every job, newest first, over all pages of ListJobs.
absl::StatusOr<int> RunList(Connection& connection,
                            const CommandOptions& options);

// The queued jobs in the order plateaud will consider them, each with its
// place and why it waits (JSON: the ListJobsResponse in that order).
absl::StatusOr<int> RunQueue(Connection& connection,
                             const CommandOptions& options);

absl::StatusOr<int> RunDescribe(Connection& connection,
                                const CommandOptions& options,
                                const std::string& job_id);

// Events and worker lines; with `follow` until the job ends, and then the
// job's exit status.
absl::StatusOr<int> RunLogs(Connection& connection,
                            const CommandOptions& options,
                            const std::string& job_id, bool follow);

absl::StatusOr<int> RunCancel(Connection& connection,
                              const CommandOptions& options,
                              const std::string& job_id,
                              const std::string& reason);

absl::StatusOr<int> RunNodes(Connection& connection,
                             const CommandOptions& options);

// Drains (with `reason`; with `preempt`, preempting its running jobs) or
// resumes the node and prints its resulting state ("node-a: DRAINING (new
// NIC)"), or its JSON. Admins only (plateaud says PERMISSION_DENIED to
// others).
absl::StatusOr<int> RunDrain(Connection& connection,
                             const CommandOptions& options,
                             const std::string& node, bool drain,
                             const std::string& reason, bool preempt);

// Plans the spec file's memory (plan::PlanJob) and prints the plan
// (plan_view.h). Without options.device_memory_bytes, plans for the largest
// per-device memory of plateaud's nodes; when plateaud cannot tell (it is
// unreachable or knows no node's memory) says so and returns kExitUsage.
// kExitOk when the job fits, kExitError when it does not.
absl::StatusOr<int> RunPlan(Connection& connection,
                            const CommandOptions& options,
                            const std::string& spec_path,
                            plan::PlanOptions plan_options);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_COMMANDS_H_
