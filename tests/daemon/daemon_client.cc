#include "tests/daemon/daemon_client.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace plateau::testing {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace

std::shared_ptr<grpc::Channel> LocalChannel(int port) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureChannelCredentials());
}

std::unique_ptr<grpc::ClientContext> CallContext(const std::string& token,
                                                 absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

std::string SpecYaml(const SpecOptions& options) {
  const int devices = options.nodes * options.devices_per_node;
  return absl::StrCat(
      "name: ", options.name, "\n", "priority: ", options.priority, "\n",
      "resources: {nodes: ", options.nodes,
      ", devices_per_node: ", options.devices_per_node, "}\n",
      "model: {layers: 2, d_model: 64, heads: 4, experts: ", 2 * devices,
      ", top_k: 2, ffn_hidden: 128, vocab: 512, seq_len: 64}\n",
      "parallel: {ep: ", devices, ", pp: 1, dp: 1}\n",
      // Four sequences per rank: divides evenly however the ranks split it.
      "data: {path: data/brown, batch_tokens: ", 256 * devices, "}\n",
      "train: {steps: 10", ", max_restarts: ", options.max_restarts,
      options.time_limit.empty()
          ? std::string()
          : absl::StrCat(", time_limit: ", options.time_limit),
      "}\n");
}

absl::StatusOr<v1::Job> Submit(v1::Coordinator::Stub& stub,
                               const std::string& yaml,
                               const std::string& token) {
  v1::SubmitJobRequest request;
  request.set_spec_yaml(yaml);
  v1::SubmitJobResponse response;
  auto context = CallContext(token);
  const grpc::Status status = stub.SubmitJob(context.get(), request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response.job();
}

absl::StatusOr<v1::Job> GetJob(v1::Coordinator::Stub& stub,
                               const std::string& job_id,
                               const std::string& token) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  auto context = CallContext(token);
  const grpc::Status status = stub.GetJob(context.get(), request, &job);
  if (!status.ok()) return FromGrpc(status);
  return job;
}

absl::StatusOr<v1::Job> WaitForState(v1::Coordinator::Stub& stub,
                                     const std::string& job_id,
                                     v1::JobState state, absl::Duration timeout,
                                     const std::string& token) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<v1::Job> job = GetJob(stub, job_id, token);
    if (!job.ok() || job->state() == state) return job;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          job_id, " is ", v1::JobState_Name(job->state()), ", not ",
          v1::JobState_Name(state), " after ", absl::FormatDuration(timeout),
          job->wait_reason().empty() ? "" : " (" + job->wait_reason() + ")"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<v1::Job> WaitForJob(
    v1::Coordinator::Stub& stub, const std::string& job_id,
    const std::function<bool(const v1::Job&)>& done, absl::Duration timeout,
    const std::string& token) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<v1::Job> job = GetJob(stub, job_id, token);
    if (!job.ok() || done(*job)) return job;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          job_id, " did not get there within ", absl::FormatDuration(timeout),
          "; it is now ", job->ShortDebugString()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<v1::Job> WaitForWaitReason(v1::Coordinator::Stub& stub,
                                          const std::string& job_id,
                                          const std::string& text,
                                          absl::Duration timeout,
                                          const std::string& token) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<v1::Job> job = GetJob(stub, job_id, token);
    if (!job.ok()) return job;
    if (!job->wait_reason().empty() &&
        job->wait_reason().find(text) != std::string::npos) {
      return job;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          job_id, ": no wait reason with '", text, "' after ",
          absl::FormatDuration(timeout), " (has '", job->wait_reason(), "')"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace plateau::testing
