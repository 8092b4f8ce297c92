#include "worker/agent/agent.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "proto/job_spec.h"
#include "worker/agent/coordinator_channel.h"
#include "worker/agent/rank_environment.h"
#include "worker/agent/rank_lease.h"

namespace plateau::worker {
namespace {

constexpr absl::Duration kFirstReconnectDelay = absl::Milliseconds(200);
// Lines per LogBatch message.
constexpr size_t kLinesPerBatch = 1000;
// Unacknowledged heartbeats remembered per stream (a plateaud that never
// acknowledges grants no lease either).
constexpr size_t kMaxUnacknowledgedHeartbeats = 64;

void SleepUnlessStopped(absl::Duration duration,
                        const std::atomic<bool>* stop) {
  const absl::Time end = absl::Now() + duration;
  while (!stop->load() && absl::Now() < end) {
    absl::SleepFor(std::min(absl::Milliseconds(50), end - absl::Now()));
  }
}

absl::Duration DurationOf(const google::protobuf::Duration& duration) {
  return absl::Seconds(duration.seconds()) +
         absl::Nanoseconds(duration.nanos());
}

std::string AttemptName(const v1::AttemptRef& attempt) {
  return absl::StrCat(attempt.job_id(), " attempt ", attempt.attempt());
}

bool SameProgress(const v1::JobProgress& a, const v1::JobProgress& b) {
  return a.step() == b.step() && a.checkpoint_step() == b.checkpoint_step() &&
         a.validation_loss() == b.validation_loss() &&
         a.tokens_total() == b.tokens_total();
}

// The ranks of `start` on this node, as `plateau-worker train` processes:
// local rank i on the start's i-th device, CUDA ranks on the CUDA backend.
RankCommand RankCommandOf(const v1::StartAttempt& start,
                          const AgentOptions& options,
                          const std::string& directory,
                          const std::string& spec_path,
                          const v1::Device& device) {
  RankCommand command;
  command.argv = {options.worker_binary,
                  "train",
                  spec_path,
                  absl::StrCat("--run_dir=", start.checkpoint_dir()),
                  absl::StrCat("--device_memory=", device.memory_bytes()),
                  absl::StrCat("--threads=", options.threads_per_rank),
                  absl::StrCat("--attempt=", start.attempt().attempt())};
  if (!start.read_roots().empty()) {
    command.argv.push_back(
        absl::StrCat("--read_roots=", absl::StrJoin(start.read_roots(), ",")));
  }
  if (!start.precision_reason().empty()) {
    command.argv.push_back(
        absl::StrCat("--precision_reason=", start.precision_reason()));
  }
  if (device.kind() == v1::DEVICE_KIND_CUDA) {
    command.argv.push_back("--backend=cuda");
    command.argv.push_back(absl::StrCat(
        "--cuda_devices=", absl::StrJoin(start.device_indices(), ",")));
  }
  // A later attempt continues from the run directory's newest complete
  // checkpoint (a fresh start if there is none); the first one must not
  // find any.
  if (start.attempt().attempt() > 1 || !start.checkpoint_location().empty()) {
    command.argv.push_back("--resume");
  }
  command.env[kCoordinatorVariable] = options.coordinator;
  command.env[kRendezvousScopeVariable] = start.rendezvous_key();
  command.env[kNodeTokenVariable] = options.token;
  command.env[kCaCertVariable] = options.tls.ca_cert_path;
  command.env[kClientCertVariable] = options.tls.client_cert_path;
  command.env[kClientKeyVariable] = options.tls.client_key_path;
  command.env[kStatusDirectoryVariable] = directory;
  command.env[kRankAddressVariable] = options.rank_address;
  command.world_size = start.world_size();
  command.first_rank = start.first_rank();
  command.local_ranks = start.device_indices_size();
  if (start.has_stop_grace_period()) {
    command.stop_grace_period = DurationOf(start.stop_grace_period());
  }
  command.directory = directory;
  return command;
}

}  // namespace

bool WorkerAgent::Session::Send(const v1::WorkerMessage& message) {
  absl::MutexLock lock(&write_mutex);
  return stream->Write(message);
}

bool WorkerAgent::Session::SendHeartbeat(int64_t sequence) {
  v1::WorkerMessage message;
  message.mutable_heartbeat()->set_sequence(sequence);
  absl::MutexLock lock(&write_mutex);
  // Taken before the write: plateaud hears the beat no earlier.
  unacknowledged[sequence] = MonotonicNow();
  while (unacknowledged.size() > kMaxUnacknowledgedHeartbeats) {
    unacknowledged.erase(unacknowledged.begin());
  }
  return stream->Write(message);
}

std::optional<absl::Duration> WorkerAgent::Session::Acknowledged(
    int64_t sequence) {
  absl::MutexLock lock(&write_mutex);
  auto found = unacknowledged.find(sequence);
  if (found == unacknowledged.end()) return std::nullopt;
  const absl::Duration sent = found->second;
  unacknowledged.erase(unacknowledged.begin(), std::next(found));
  return sent;
}

WorkerAgent::WorkerAgent(AgentOptions options, WorkerMetrics* metrics,
                         std::ostream* log)
    : options_(std::move(options)), metrics_(metrics), log_(log) {}

WorkerAgent::~WorkerAgent() = default;

void WorkerAgent::Log(const std::string& line) {
  absl::MutexLock lock(&log_mutex_);
  *log_ << "plateau-worker: " << line << "\n";
  log_->flush();
}

std::shared_ptr<WorkerAgent::Session> WorkerAgent::CurrentSession() {
  absl::MutexLock lock(&mutex_);
  return session_;
}

void WorkerAgent::Run(const std::atomic<bool>* stop) {
  std::atomic<bool> reporting_done{false};
  std::thread reporter(
      [this, &reporting_done] { ReportLoop(&reporting_done); });
  std::thread connections([this, stop] { ServeConnections(stop); });
  while (!stop->load()) absl::SleepFor(absl::Milliseconds(100));

  // Stop every attempt, then wait for the ranks (each gets its grace
  // period) and for their ends to be reported.
  absl::Duration longest_grace = absl::ZeroDuration();
  {
    absl::MutexLock lock(&mutex_);
    int running = 0;
    for (auto& [key, attempt] : attempts_) {
      if (attempt.runner == nullptr || attempt.runner->Done()) continue;
      ++running;
      attempt.runner->Stop();
      longest_grace =
          std::max(longest_grace, attempt.runner->command().stop_grace_period);
    }
    Log(absl::StrCat("shutting down: stopping ", running,
                     " running attempt(s)"));
  }
  const absl::Time deadline = absl::Now() + longest_grace + absl::Seconds(5);
  while (absl::Now() < deadline) {
    {
      absl::MutexLock lock(&mutex_);
      bool settled = true;
      for (const auto& [key, attempt] : attempts_) {
        const bool done = attempt.runner == nullptr || attempt.runner->Done();
        settled &= done && (attempt.outcome_sent || session_ == nullptr);
      }
      if (settled) break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  reporting_done = true;
  reporter.join();
  // Ends the stream now, and any that an attach in flight opens next.
  disconnecting_ = true;
  if (std::shared_ptr<Session> session = CurrentSession()) {
    session->context.TryCancel();
  }
  connections.join();
  std::map<AttemptKey, Attempt> attempts;
  {
    absl::MutexLock lock(&mutex_);
    attempts.swap(attempts_);
  }
  attempts.clear();  // a runner still going is stopped and waited for
}

void WorkerAgent::ServeConnections(const std::atomic<bool>* stop) {
  absl::Duration delay = kFirstReconnectDelay;
  absl::Duration max_delay = options_.max_reconnect_delay;
  bool failure_logged = false;
  while (!stop->load()) {
    absl::StatusOr<std::shared_ptr<Session>> session = Attach();
    if (!session.ok()) {
      if (!failure_logged) {
        Log(absl::StrCat("cannot attach to plateaud at ", options_.coordinator,
                         ": ", session.status().message(),
                         "; retrying with backoff"));
        failure_logged = true;
      }
      SleepUnlessStopped(delay, stop);
      delay = std::min(delay * 2, max_delay);
      continue;
    }
    failure_logged = false;
    delay = kFirstReconnectDelay;
    // Re-attaching at least as often as it heartbeats keeps a restarted
    // plateaud from taking this node (and its attempts) for lost.
    max_delay =
        std::min(options_.max_reconnect_delay, (*session)->heartbeat_interval);
    std::atomic<bool> ended{false};
    std::thread heartbeat(
        [this, s = session->get(), &ended] { Heartbeat(s, &ended); });
    v1::CoordinatorMessage message;
    while ((*session)->stream->Read(&message)) {
      if (message.has_start()) OnStart(message.start());
      if (message.has_stop()) OnStop(message.stop());
      if (message.has_heartbeat_ack() &&
          (*session)->rank_lease > absl::ZeroDuration()) {
        const std::optional<absl::Duration> sent =
            (*session)->Acknowledged(message.heartbeat_ack().sequence());
        absl::MutexLock lock(&mutex_);
        if (sent.has_value()) ExtendLeaseLocked(*sent + (*session)->rank_lease);
      }
    }
    ended = true;
    {
      absl::MutexLock lock(&mutex_);
      if (session_ == *session) session_.reset();
    }
    heartbeat.join();
    const grpc::Status status = (*session)->stream->Finish();
    if (!stop->load()) {
      Log(absl::StrCat("lost plateaud at ", options_.coordinator, " (",
                       status.error_message(),
                       "); the ranks keep running; re-attaching"));
    }
  }
}

absl::StatusOr<std::shared_ptr<WorkerAgent::Session>> WorkerAgent::Attach() {
  // A new channel for every try: one that failed to connect waits out
  // gRPC's own reconnect backoff, which can outlast plateaud's node timeout.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateCoordinatorChannel(options_.coordinator, options_.tls);
  if (!channel.ok()) return channel.status();
  auto session = std::make_shared<Session>();
  session->stub = v1::WorkerService::NewStub(*channel);
  if (!options_.token.empty()) {
    session->context.AddMetadata("authorization",
                                 absl::StrCat("Bearer ", options_.token));
  }
  session->stream = session->stub->Attach(&session->context);
  v1::WorkerMessage hello_message;
  v1::WorkerHello& hello = *hello_message.mutable_hello();
  hello.set_node_name(options_.node_name);
  for (const v1::Device& device : options_.devices) {
    *hello.add_devices() = device;
  }
  hello.set_host_memory_bytes(options_.host_memory_bytes);
  hello.set_metrics_address(options_.metrics_address);
  hello.set_worker_version(options_.worker_version);
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [key, attempt] : attempts_) {
      if (!attempt.stale)
        *hello.add_running_attempts() = attempt.start.attempt();
    }
  }
  v1::CoordinatorMessage reply;
  // The lease counts from the hello's send time: plateaud heard the node
  // no earlier.
  const absl::Duration hello_sent = MonotonicNow();
  if (!session->stream->Write(hello_message) ||
      !session->stream->Read(&reply)) {
    const grpc::Status status = session->stream->Finish();
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  if (!reply.has_accepted()) {
    session->context.TryCancel();
    session->stream->Finish().ok();
    return absl::InternalError("plateaud's first reply was not AttachAccepted");
  }
  const v1::AttachAccepted& accepted = reply.accepted();
  if (DurationOf(accepted.heartbeat_interval()) > absl::ZeroDuration()) {
    session->heartbeat_interval = DurationOf(accepted.heartbeat_interval());
  }
  session->rank_lease = DurationOf(accepted.rank_lease());
  absl::MutexLock lock(&mutex_);
  for (const v1::AttemptRef& stale : accepted.stale_attempts()) {
    auto found = attempts_.find({stale.job_id(), stale.attempt()});
    if (found == attempts_.end()) continue;
    found->second.stale = true;
    if (found->second.runner != nullptr) found->second.runner->Stop();
  }
  // Everything is reported afresh on the new stream.
  for (auto& [key, attempt] : attempts_) {
    attempt.running_reported = false;
    attempt.outcome_sent = false;
    attempt.last_progress.Clear();
    attempt.last_memory_report = absl::InfinitePast();
  }
  session_ = session;
  if (session->rank_lease > absl::ZeroDuration()) {
    ExtendLeaseLocked(hello_sent + session->rank_lease);
  }
  Log(absl::StrCat("attached to plateaud at ", options_.coordinator,
                   " as node ", options_.node_name, " with ",
                   options_.devices.size(), " device(s), ", attempts_.size(),
                   " attempt(s) re-reported, ", accepted.stale_attempts_size(),
                   " stale"));
  return session;
}

void WorkerAgent::Heartbeat(Session* session, const std::atomic<bool>* ended) {
  int64_t sequence = 0;
  absl::Time next = absl::Now();
  while (!ended->load()) {
    if (disconnecting_) {
      session->context.TryCancel();
      return;
    }
    if (absl::Now() >= next) {
      if (!session->SendHeartbeat(++sequence)) {
        session->context.TryCancel();  // ends the reader's Read too
        return;
      }
      next = absl::Now() + session->heartbeat_interval;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

void WorkerAgent::OnStart(const v1::StartAttempt& start) {
  const AttemptKey key{start.attempt().job_id(), start.attempt().attempt()};
  {
    absl::MutexLock lock(&mutex_);
    if (attempts_.count(key) > 0) return;  // a repeated command
  }
  Attempt attempt;
  attempt.start = start;
  const std::string directory = absl::StrCat("attempts/", options_.node_name,
                                             "/", key.first, "-", key.second);
  const std::string spec_path = directory + "/spec.yaml";
  // A node's devices are of one kind; every rank gets the smallest pool of
  // the start's devices.
  const v1::Device* device = nullptr;
  for (const int index : start.device_indices()) {
    for (const v1::Device& offered : options_.devices) {
      if (offered.index() == index &&
          (device == nullptr ||
           offered.memory_bytes() < device->memory_bytes())) {
        device = &offered;
      }
    }
  }
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  const std::string spec_yaml = JobSpecToYaml(start.spec());
  absl::Status prepared =
      error ? absl::InternalError(absl::StrCat("cannot create ", directory,
                                               ": ", error.message()))
            : WriteFileAtomically(spec_path, {spec_yaml});
  if (prepared.ok() && device == nullptr) {
    prepared = absl::InvalidArgumentError(
        "the start command names no device of this node");
  }
  std::optional<absl::Duration> lease_expiry;
  {
    absl::MutexLock lock(&mutex_);
    lease_expiry = lease_expiry_;
  }
  // The ranks must find their lease from their first instant.
  if (prepared.ok() && lease_expiry.has_value()) {
    prepared = WriteRankLease(RankLeasePath(directory), *lease_expiry);
  }
  if (prepared.ok()) {
    RankCommand command =
        RankCommandOf(start, options_, directory, spec_path, *device);
    if (lease_expiry.has_value()) {
      command.env[kRankLeaseVariable] = RankLeasePath(directory);
    }
    absl::StatusOr<std::unique_ptr<AttemptRunner>> runner =
        AttemptRunner::Start(
            start.attempt(), std::move(command),
            [this, ref = start.attempt()](int rank, const std::string& text) {
              QueueLine(ref, rank, text);
            });
    if (runner.ok()) {
      attempt.runner = *std::move(runner);
    } else {
      prepared = runner.status();
    }
  }
  if (!prepared.ok()) {
    *attempt.start_failure.mutable_attempt() = start.attempt();
    attempt.start_failure.set_phase(v1::ATTEMPT_PHASE_FAILED);
    attempt.start_failure.set_failed_rank(start.first_rank());
    attempt.start_failure.set_exit_code(-1);
    attempt.start_failure.set_error(
        absl::StrCat("node ", options_.node_name,
                     " could not start its ranks: ", prepared.message()));
  }
  Log(absl::StrCat(prepared.ok() ? "started " : "could not start ",
                   AttemptName(start.attempt()), ": ranks ", start.first_rank(),
                   "..", start.first_rank() + start.device_indices_size() - 1,
                   " of ", start.world_size(), prepared.ok() ? "" : ": ",
                   prepared.ok() ? "" : prepared.message()));
  absl::MutexLock lock(&mutex_);
  auto [placed, inserted] = attempts_.emplace(key, std::move(attempt));
  // An extension since the file was written passed this attempt by.
  if (inserted && placed->second.runner != nullptr &&
      lease_expiry.has_value() && lease_expiry_ != lease_expiry) {
    WriteLease(directory, *lease_expiry_);
  }
}

void WorkerAgent::WriteLease(const std::string& directory,
                             absl::Duration expiry) {
  const absl::Status written = WriteRankLease(RankLeasePath(directory), expiry);
  if (!written.ok()) {
    Log(absl::StrCat("cannot extend the ranks' lease: ", written.message(),
                     "; they will stop when it expires"));
  }
}

void WorkerAgent::ExtendLeaseLocked(absl::Duration expiry) {
  if (lease_expiry_.has_value() && expiry <= *lease_expiry_) return;
  lease_expiry_ = expiry;
  for (const auto& [key, attempt] : attempts_) {
    if (attempt.runner == nullptr || attempt.stale || attempt.runner->Done()) {
      continue;
    }
    WriteLease(attempt.runner->command().directory, expiry);
  }
}

void WorkerAgent::OnStop(const v1::StopAttempt& stop) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mutex_);
    auto found =
        attempts_.find({stop.attempt().job_id(), stop.attempt().attempt()});
    if (found != attempts_.end()) {
      Log(absl::StrCat("stopping ", AttemptName(stop.attempt()), ": ",
                       stop.reason()));
      if (found->second.runner != nullptr) found->second.runner->Stop();
      return;
    }
    session = session_;
  }
  // Nothing of it runs here: say so, so that plateaud frees its devices.
  if (session == nullptr) return;
  v1::WorkerMessage message;
  *message.mutable_attempt_status()->mutable_attempt() = stop.attempt();
  message.mutable_attempt_status()->set_phase(v1::ATTEMPT_PHASE_STOPPED);
  session->Send(message);
}

void WorkerAgent::QueueLine(const v1::AttemptRef& attempt, int rank,
                            const std::string& text) {
  v1::WorkerLogLine line;
  line.set_job_id(attempt.job_id());
  line.set_attempt(attempt.attempt());
  line.set_node(options_.node_name);
  line.set_rank(rank);
  line.set_time_unix_micros(absl::ToUnixMicros(absl::Now()));
  line.set_text(text);
  absl::MutexLock lock(&lines_mutex_);
  lines_.push_back(std::move(line));
  while (lines_.size() > options_.max_buffered_lines) {
    lines_.pop_front();
    ++dropped_lines_;
  }
}

void WorkerAgent::SendLogLines(Session* session) {
  absl::MutexLock lock(&lines_mutex_);
  while (!lines_.empty()) {
    v1::WorkerMessage message;
    v1::LogBatch& batch = *message.mutable_logs();
    if (dropped_lines_ > 0) {
      v1::WorkerLogLine& note = *batch.add_lines();
      note = lines_.front();
      note.set_text(absl::StrCat("(", dropped_lines_,
                                 " earlier log lines were dropped while "
                                 "plateaud could not take them)"));
    }
    const size_t count = std::min(lines_.size(), kLinesPerBatch);
    for (size_t i = 0; i < count; ++i) *batch.add_lines() = lines_[i];
    if (!session->Send(message)) return;  // kept for the next stream
    lines_.erase(lines_.begin(), lines_.begin() + count);
    dropped_lines_ = 0;
  }
}

void WorkerAgent::ReportLoop(const std::atomic<bool>* done) {
  while (!done->load()) {
    ReportOnce();
    const absl::Time next = absl::Now() + options_.report_interval;
    while (!done->load() && absl::Now() < next) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  ReportOnce();
}

void WorkerAgent::ReportOnce() {
  const std::shared_ptr<Session> session = CurrentSession();
  absl::MutexLock lock(&mutex_);
  // Whether each attempt had ended before its last lines are sent: an
  // attempt's lines all reach plateaud before its outcome, which ends it.
  std::map<AttemptKey, bool> ended;
  for (const auto& [key, attempt] : attempts_) {
    ended[key] = attempt.runner == nullptr || attempt.runner->Done();
  }
  if (session != nullptr) SendLogLines(session.get());
  const absl::Time now = absl::Now();
  for (auto& [key, attempt] : attempts_) {
    ReportAttempt(session.get(), attempt, ended[key]);
    if (ended[key]) attempt.ended = std::min(attempt.ended, now);
  }
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    const Attempt& attempt = it->second;
    const bool forget = (attempt.stale && attempt.outcome_sent) ||
                        attempt.ended + options_.ended_retention < now;
    if (!forget) {
      ++it;
      continue;
    }
    const std::string job_id = it->first.first;
    // A failed attempt's files (ranks.log) stay for the post-mortem.
    if (attempt.runner != nullptr && attempt.runner->Done() &&
        attempt.runner->Outcome().phase() != v1::ATTEMPT_PHASE_FAILED) {
      std::error_code error;
      std::filesystem::remove_all(attempt.runner->command().directory, error);
    }
    it = attempts_.erase(it);
    bool job_still_here = false;
    for (const auto& [key, other] : attempts_) {
      job_still_here |= key.first == job_id;
    }
    if (!job_still_here) metrics_->Remove(job_id);
  }
}

void WorkerAgent::ReportAttempt(Session* session, Attempt& attempt,
                                bool ended) {
  const v1::AttemptRef& ref = attempt.start.attempt();
  std::vector<v1::RankStatus> statuses;
  if (attempt.runner != nullptr) statuses = attempt.runner->RankStatuses();
  if (!statuses.empty() && !attempt.stale) {
    metrics_->Update(ref.job_id(), statuses);
  }
  if (session == nullptr || attempt.outcome_sent) return;
  if (!attempt.running_reported && attempt.runner != nullptr && !ended) {
    v1::WorkerMessage message;
    *message.mutable_attempt_status()->mutable_attempt() = ref;
    message.mutable_attempt_status()->set_phase(v1::ATTEMPT_PHASE_RUNNING);
    attempt.running_reported = session->Send(message);
  }
  for (const v1::RankStatus& status : statuses) {
    if (status.rank() != 0 ||
        SameProgress(status.progress(), attempt.last_progress)) {
      continue;
    }
    v1::WorkerMessage message;
    *message.mutable_progress()->mutable_attempt() = ref;
    *message.mutable_progress()->mutable_progress() = status.progress();
    if (session->Send(message)) attempt.last_progress = status.progress();
  }
  const absl::Time now = absl::Now();
  if (!statuses.empty() && (ended || now - attempt.last_memory_report >=
                                         options_.memory_report_interval)) {
    v1::WorkerMessage message;
    *message.mutable_memory()->mutable_attempt() = ref;
    for (const v1::RankStatus& status : statuses) {
      *message.mutable_memory()->add_ranks() = status.memory();
    }
    if (session->Send(message)) attempt.last_memory_report = now;
  }
  if (!ended) return;
  v1::WorkerMessage message;
  *message.mutable_attempt_status() = attempt.runner != nullptr
                                          ? attempt.runner->Outcome()
                                          : attempt.start_failure;
  attempt.outcome_sent = session->Send(message);
  if (attempt.outcome_sent) {
    const v1::AttemptStatus& outcome = message.attempt_status();
    Log(absl::StrCat(AttemptName(ref),
                     " ended: ", v1::AttemptPhase_Name(outcome.phase()),
                     outcome.error().empty() ? "" : ": ", outcome.error()));
  }
}

}  // namespace plateau::worker
