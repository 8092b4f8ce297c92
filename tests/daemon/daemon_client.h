// Test and benchmark helpers for talking to plateaud: channels, stubs with a
// bearer token, and job specs.
#ifndef PLATEAU_TESTS_DAEMON_DAEMON_CLIENT_H_
#define PLATEAU_TESTS_DAEMON_DAEMON_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/coordinator.grpc.pb.h"

namespace plateau::testing {

std::shared_ptr<grpc::Channel> LocalChannel(int port);

// A context carrying "authorization: Bearer <token>" (when set) and a
// deadline.
std::unique_ptr<grpc::ClientContext> CallContext(
    const std::string& token, absl::Duration timeout = absl::Seconds(10));

struct SpecOptions {
  std::string name = "job";
  int nodes = 1;
  int devices_per_node = 1;
  int priority = 50;
  int max_restarts = 0;
  std::string time_limit;  // e.g. "10m"; empty: none
};

// A valid spec YAML with a small model, for the daemon (it never trains).
std::string SpecYaml(const SpecOptions& options);

// Submits `yaml`; the returned status carries the gRPC code and message.
absl::StatusOr<v1::Job> Submit(v1::Coordinator::Stub& stub,
                               const std::string& yaml,
                               const std::string& token = "");
absl::StatusOr<v1::Job> GetJob(v1::Coordinator::Stub& stub,
                               const std::string& job_id,
                               const std::string& token = "");
// Polls GetJob until the job is in `state`.
absl::StatusOr<v1::Job> WaitForState(v1::Coordinator::Stub& stub,
                                     const std::string& job_id,
                                     v1::JobState state, absl::Duration timeout,
                                     const std::string& token = "");

// Polls GetJob until `done` holds for the job.
absl::StatusOr<v1::Job> WaitForJob(
    v1::Coordinator::Stub& stub, const std::string& job_id,
    const std::function<bool(const v1::Job&)>& done, absl::Duration timeout,
    const std::string& token = "");

// Polls GetJob until the job's wait_reason contains `text` (any reason when
// empty). Reasons refresh about once a second.
absl::StatusOr<v1::Job> WaitForWaitReason(v1::Coordinator::Stub& stub,
                                          const std::string& job_id,
                                          const std::string& text,
                                          absl::Duration timeout,
                                          const std::string& token = "");

}  // namespace plateau::testing

#endif  // PLATEAU_TESTS_DAEMON_DAEMON_CLIENT_H_
