// A plateau-worker stand-in for tests and benchmarks: attaches to plateaud
// over real gRPC, announces CPU devices, heartbeats from a thread, records
// the commands it receives, and reports attempt status, progress and logs
// when told to. It runs no ranks.
#ifndef PLATEAU_TESTS_DAEMON_SIMULATED_WORKER_H_
#define PLATEAU_TESTS_DAEMON_SIMULATED_WORKER_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/worker.grpc.pb.h"

namespace plateau::testing {

struct SimulatedWorkerOptions {
  std::string name;
  int devices = 2;
  int64_t device_memory_bytes = int64_t{2} << 30;
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  std::string token;  // sent as "Bearer <token>" when set
  // Attempts it claims to be running, for re-attaching after a restart.
  std::vector<v1::AttemptRef> running_attempts;
};

class SimulatedWorker {
 public:
  // Connects, sends the hello and waits for AttachAccepted.
  static absl::StatusOr<std::unique_ptr<SimulatedWorker>> Attach(
      std::shared_ptr<grpc::Channel> channel,
      const SimulatedWorkerOptions& options);
  ~SimulatedWorker();

  const v1::AttachAccepted& accepted() const { return accepted_; }
  const std::string& name() const { return options_.name; }

  // The next start (or stop) command for `job_id`, waiting up to `timeout`.
  absl::StatusOr<v1::StartAttempt> WaitForStart(const std::string& job_id,
                                                absl::Duration timeout);
  absl::StatusOr<v1::StopAttempt> WaitForStop(const std::string& job_id,
                                              absl::Duration timeout);
  // Every start command received so far.
  std::vector<v1::StartAttempt> starts() const;

  bool ReportPhase(const v1::AttemptRef& attempt, v1::AttemptPhase phase,
                   const std::string& error = "");
  bool ReportProgress(const v1::AttemptRef& attempt,
                      const v1::JobProgress& progress);
  bool SendLogLine(const v1::AttemptRef& attempt, const std::string& text);

  // The highest heartbeat sequence plateaud has acknowledged once it is at
  // least `sequence`, waiting up to `timeout`.
  absl::StatusOr<int64_t> WaitForHeartbeatAck(int64_t sequence,
                                              absl::Duration timeout);

  // Stops heartbeating (the daemon will find it lost) but keeps the stream.
  void StopHeartbeats();
  // Whether the daemon ended the stream within `timeout`.
  bool WaitUntilClosed(absl::Duration timeout);
  // Closes the stream, as a crashed worker would.
  void Disconnect();

 private:
  SimulatedWorker(std::shared_ptr<grpc::Channel> channel,
                  const SimulatedWorkerOptions& options);
  bool Send(const v1::WorkerMessage& message);
  // Removes and returns the first received command `pick` accepts for
  // job_id, waiting up to `timeout`.
  template <typename Command, typename Pick>
  absl::StatusOr<Command> TakeCommand(const std::string& job_id,
                                      absl::Duration timeout, Pick pick);
  void ReadLoop();
  void HeartbeatLoop();

  SimulatedWorkerOptions options_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>>
      stream_;
  v1::AttachAccepted accepted_;
  absl::Mutex write_mutex_;
  mutable absl::Mutex mutex_;
  absl::CondVar received_changed_;
  std::deque<v1::CoordinatorMessage> received_ ABSL_GUARDED_BY(mutex_);
  std::vector<v1::StartAttempt> starts_ ABSL_GUARDED_BY(mutex_);
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t acknowledged_ ABSL_GUARDED_BY(mutex_) = 0;
  std::atomic<bool> heartbeating_{true};
  std::atomic<bool> stopping_{false};
  std::thread reader_;
  std::thread heartbeater_;
};

}  // namespace plateau::testing

#endif  // PLATEAU_TESTS_DAEMON_SIMULATED_WORKER_H_
