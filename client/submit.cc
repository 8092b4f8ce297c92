// `plateau submit SPEC [--watch]`.
#include <iostream>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/progress_printer.h"
#include "client/streams.h"
#include "common/file_util.h"
#include "proto/job_spec.h"

namespace plateau::client {
namespace {

// A spec's problems, one per line, each prefixed with the file's name:
// "job.yaml: model.heads: 7 does not divide d_model 256".
void PrintSpecProblems(const std::string& spec_path,
                       absl::string_view problems) {
  for (absl::string_view line :
       absl::StrSplit(problems, '\n', absl::SkipEmpty())) {
    std::cerr << TerminalSafe(spec_path) << ": " << TerminalSafe(line) << "\n";
  }
}

// 128 random bits: a retried submit of this invocation would be recognised.
std::string NewIdempotencyKey() {
  absl::BitGen bits;
  return absl::StrFormat("cli-%016x%016x", absl::Uniform<uint64_t>(bits),
                         absl::Uniform<uint64_t>(bits));
}

}  // namespace

absl::StatusOr<int> RunSubmit(Connection& connection,
                              const CommandOptions& options,
                              const std::string& spec_path, bool watch) {
  absl::StatusOr<std::string> yaml = ReadFileToString(spec_path);
  if (!yaml.ok()) return yaml.status();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(*yaml);
  if (!spec.ok()) {
    PrintSpecProblems(spec_path, spec.status().message());
    return kExitError;
  }

  v1::SubmitJobRequest request;
  request.set_spec_yaml(*yaml);
  request.set_idempotency_key(NewIdempotencyKey());
  v1::SubmitJobResponse response;
  const grpc::Status status = connection.stub().SubmitJob(
      connection.NewContext().get(), request, &response);
  // The server's problems with the spec, shown like the local ones.
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    PrintSpecProblems(spec_path, status.error_message());
    return kExitError;
  }
  if (!status.ok()) return connection.Error(status);
  const v1::Job& job = response.job();
  std::cout << "submitted " << job.id() << " (" << job.spec().name() << ")"
            << std::endl;
  if (!watch) return kExitOk;

  ProgressPrinter::Options printing;
  printing.terminal = options.terminal;
  printing.width = options.terminal_width;
  ProgressPrinter printer(std::cout, printing);
  absl::StatusOr<v1::Job> final_job = FollowJob(connection, job.id(), printer);
  if (!final_job.ok()) return final_job.status();
  printer.Finish(*final_job);
  return ExitCodeForJob(final_job->state());
}

}  // namespace plateau::client
