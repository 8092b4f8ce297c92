#include "tests/daemon/simulated_worker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace plateau::testing {

SimulatedWorker::SimulatedWorker(std::shared_ptr<grpc::Channel> channel,
                                 const SimulatedWorkerOptions& options)
    : options_(options), stub_(v1::WorkerService::NewStub(channel)) {}

absl::StatusOr<std::unique_ptr<SimulatedWorker>> SimulatedWorker::Attach(
    std::shared_ptr<grpc::Channel> channel,
    const SimulatedWorkerOptions& options) {
  std::unique_ptr<SimulatedWorker> worker(
      new SimulatedWorker(std::move(channel), options));
  if (!options.token.empty()) {
    worker->context_.AddMetadata("authorization", "Bearer " + options.token);
  }
  worker->stream_ = worker->stub_->Attach(&worker->context_);
  v1::WorkerMessage hello;
  v1::WorkerHello& body = *hello.mutable_hello();
  body.set_node_name(options.name);
  for (int i = 0; i < options.devices; ++i) {
    v1::Device& device = *body.add_devices();
    device.set_index(i);
    device.set_kind(v1::DEVICE_KIND_CPU);
    device.set_model("cpu");
    device.set_memory_bytes(options.device_memory_bytes);
  }
  body.set_host_memory_bytes(int64_t{24} << 30);
  body.set_metrics_address("127.0.0.1:0");
  body.set_worker_version("simulated");
  for (const v1::AttemptRef& attempt : options.running_attempts) {
    *body.add_running_attempts() = attempt;
  }
  v1::CoordinatorMessage reply;
  if (!worker->stream_->Write(hello) || !worker->stream_->Read(&reply)) {
    worker->stopping_ = true;  // no threads to stop, nothing more to finish
    const grpc::Status status = worker->stream_->Finish();
    return absl::Status(
        static_cast<absl::StatusCode>(status.error_code()),
        absl::StrCat("attach failed: ", status.error_message()));
  }
  if (!reply.has_accepted()) {
    worker->stopping_ = true;
    worker->context_.TryCancel();
    worker->stream_->Finish().ok();
    return absl::InternalError("the first reply was not AttachAccepted");
  }
  worker->accepted_ = reply.accepted();
  worker->reader_ = std::thread([w = worker.get()] { w->ReadLoop(); });
  worker->heartbeater_ =
      std::thread([w = worker.get()] { w->HeartbeatLoop(); });
  return worker;
}

SimulatedWorker::~SimulatedWorker() { Disconnect(); }

void SimulatedWorker::Disconnect() {
  {
    absl::MutexLock lock(&mutex_);  // wakes HeartbeatLoop
    if (stopping_.exchange(true)) return;
  }
  if (heartbeater_.joinable()) heartbeater_.join();
  context_.TryCancel();
  if (reader_.joinable()) reader_.join();
  stream_->Finish().ok();  // CANCELLED: the end of the stream is the point
}

void SimulatedWorker::ReadLoop() {
  v1::CoordinatorMessage message;
  while (stream_->Read(&message)) {
    absl::MutexLock lock(&mutex_);
    if (message.has_heartbeat_ack()) {
      acknowledged_ =
          std::max(acknowledged_, message.heartbeat_ack().sequence());
      received_changed_.SignalAll();
      continue;
    }
    if (message.has_start()) starts_.push_back(message.start());
    received_.push_back(message);
    received_changed_.SignalAll();
  }
  absl::MutexLock lock(&mutex_);
  closed_ = true;
  received_changed_.SignalAll();
}

absl::StatusOr<int64_t> SimulatedWorker::WaitForHeartbeatAck(
    int64_t sequence, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mutex_);
  while (acknowledged_ < sequence && !closed_) {
    if (received_changed_.WaitWithDeadline(&mutex_, deadline)) break;
  }
  if (acknowledged_ < sequence) {
    return absl::DeadlineExceededError(absl::StrCat(
        "heartbeat ", sequence, " was not acknowledged within ",
        absl::FormatDuration(timeout), " (latest: ", acknowledged_, ")"));
  }
  return acknowledged_;
}

void SimulatedWorker::HeartbeatLoop() {
  int64_t sequence = 0;
  while (!stopping_) {
    if (heartbeating_) {
      v1::WorkerMessage message;
      message.mutable_heartbeat()->set_sequence(++sequence);
      Send(message);
    }
    // Sleeps until the next beat, or until Disconnect.
    absl::MutexLock lock(&mutex_);
    mutex_.AwaitWithTimeout(
        absl::Condition(
            +[](std::atomic<bool>* stopping) { return stopping->load(); },
            &stopping_),
        options_.heartbeat_interval);
  }
}

bool SimulatedWorker::Send(const v1::WorkerMessage& message) {
  absl::MutexLock lock(&write_mutex_);
  return !stopping_ && stream_->Write(message);
}

template <typename Command, typename Pick>
absl::StatusOr<Command> SimulatedWorker::TakeCommand(const std::string& job_id,
                                                     absl::Duration timeout,
                                                     Pick pick) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mutex_);
  while (true) {
    for (auto it = received_.begin(); it != received_.end(); ++it) {
      const Command* command = pick(*it);
      if (command != nullptr && command->attempt().job_id() == job_id) {
        Command found = *command;
        received_.erase(it);
        return found;
      }
    }
    if (closed_) return absl::UnavailableError("the stream closed");
    if (received_changed_.WaitWithDeadline(&mutex_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat(options_.name, ": no command for ", job_id, " within ",
                       absl::FormatDuration(timeout)));
    }
  }
}

absl::StatusOr<v1::StartAttempt> SimulatedWorker::WaitForStart(
    const std::string& job_id, absl::Duration timeout) {
  return TakeCommand<v1::StartAttempt>(
      job_id, timeout,
      [](const v1::CoordinatorMessage& m) -> const v1::StartAttempt* {
        return m.has_start() ? &m.start() : nullptr;
      });
}

absl::StatusOr<v1::StopAttempt> SimulatedWorker::WaitForStop(
    const std::string& job_id, absl::Duration timeout) {
  return TakeCommand<v1::StopAttempt>(
      job_id, timeout,
      [](const v1::CoordinatorMessage& m) -> const v1::StopAttempt* {
        return m.has_stop() ? &m.stop() : nullptr;
      });
}

std::vector<v1::StartAttempt> SimulatedWorker::starts() const {
  absl::MutexLock lock(&mutex_);
  return starts_;
}

bool SimulatedWorker::ReportPhase(const v1::AttemptRef& attempt,
                                  v1::AttemptPhase phase,
                                  const std::string& error) {
  v1::WorkerMessage message;
  v1::AttemptStatus& status = *message.mutable_attempt_status();
  *status.mutable_attempt() = attempt;
  status.set_phase(phase);
  if (phase == v1::ATTEMPT_PHASE_FAILED) {
    status.set_exit_code(1);
    status.set_error(error);
  }
  return Send(message);
}

bool SimulatedWorker::ReportProgress(const v1::AttemptRef& attempt,
                                     const v1::JobProgress& progress) {
  v1::WorkerMessage message;
  *message.mutable_progress()->mutable_attempt() = attempt;
  *message.mutable_progress()->mutable_progress() = progress;
  return Send(message);
}

bool SimulatedWorker::SendLogLine(const v1::AttemptRef& attempt,
                                  const std::string& text) {
  v1::WorkerMessage message;
  v1::WorkerLogLine& line = *message.mutable_logs()->add_lines();
  line.set_job_id(attempt.job_id());
  line.set_attempt(attempt.attempt());
  line.set_text(text);
  return Send(message);
}

void SimulatedWorker::StopHeartbeats() { heartbeating_ = false; }

bool SimulatedWorker::WaitUntilClosed(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithTimeout(
      absl::Condition(
          +[](bool* closed) { return *closed; }, &closed_),
      timeout);
}

}  // namespace plateau::testing
