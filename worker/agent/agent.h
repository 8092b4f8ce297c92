// The worker agent (`plateau-worker --coordinator ADDRESS`): one per node.
//
// It attaches to plateaud over WorkerService.Attach, announcing the node's
// devices, host memory and metrics address, and heartbeats. A start command
// launches the attempt's ranks of this node (`plateau-worker train` as
// global ranks first_rank.., rendezvous through plateaud, resuming from the
// attempt's run directory); a stop command ends them (SIGTERM, grace
// period, SIGKILL). Every report_interval it reads the ranks' status files
// (rank_status.h) and relays them: progress (from rank 0's node: step,
// loss, tokens/s, checkpoints), memory per rank, and the ranks' log lines;
// and it sets the node's /metrics (worker_metrics.h). When the ranks end it
// reports SUCCEEDED, FAILED (which rank, its exit code, its last stderr) or
// STOPPED.
//
// The ranks run on a lease (rank_lease.h): every heartbeat plateaud
// acknowledges extends it, and the agent writes its expiry into each
// running attempt's directory; ranks end themselves once it has passed, so
// a node cut off from plateaud (or an agent frozen) cannot go on training
// beside the attempt that replaces it.
//
// plateaud may die at any time: the ranks keep running for the lease, and
// the agent re-attaches with backoff, listing the attempts it still runs (and
// those that ended since) so plateaud re-adopts them; an ended attempt's
// outcome is sent again after every attach until plateaud calls it stale. Lines
// that cannot be sent meanwhile are buffered, up to a bound.
//
// Paths: the agent runs in its work directory. An attempt's files live in
// attempts/<node>/<job>-<attempt>/ (spec, ranks.log, status files), removed
// when the agent forgets the attempt unless it failed. Its checkpoints go to
// the run directory plateaud names (runs/<job>/), which every node must
// share; relative data paths of job specs must resolve the same on every
// node too.
#ifndef PLATEAU_WORKER_AGENT_AGENT_H_
#define PLATEAU_WORKER_AGENT_AGENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"
#include "worker/agent/attempt_runner.h"
#include "worker/agent/coordinator_channel.h"
#include "worker/agent/worker_metrics.h"

namespace plateau::worker {

struct AgentOptions {
  std::string coordinator;  // host:port
  CoordinatorTls tls;       // absolute paths; the ranks use them too
  std::string token;        // the node's token; "" without auth
  std::string node_name;
  std::vector<v1::Device> devices;
  int64_t host_memory_bytes = 0;
  std::string metrics_address;  // host:port announced to plateaud
  // The address this node's ranks listen on for their peers (Gloo).
  std::string rank_address = "127.0.0.1";
  std::string worker_version;
  // This binary, run as `train` for each rank.
  std::string worker_binary;
  int threads_per_rank = 1;
  absl::Duration report_interval = absl::Milliseconds(500);
  absl::Duration memory_report_interval = absl::Seconds(2);
  // Between attempts to re-attach; never more than plateaud's heartbeat
  // interval once it has said it.
  absl::Duration max_reconnect_delay = absl::Seconds(5);
  // How long an ended attempt is remembered (and its metrics kept).
  absl::Duration ended_retention = absl::Minutes(10);
  // Log lines held while plateaud cannot take them; older ones are dropped.
  size_t max_buffered_lines = 20'000;
};

class WorkerAgent {
 public:
  WorkerAgent(AgentOptions options, WorkerMetrics* metrics, std::ostream* log);
  ~WorkerAgent();

  // Serves until *stop turns true; then stops every attempt's ranks, reports
  // their end if plateaud can be reached, and returns.
  void Run(const std::atomic<bool>* stop);

 private:
  using AttemptKey = std::pair<std::string, int32_t>;
  struct Attempt {
    v1::StartAttempt start;
    std::unique_ptr<AttemptRunner> runner;  // null if it could not start
    v1::AttemptStatus start_failure;        // when runner is null
    bool running_reported = false;
    v1::JobProgress last_progress;
    absl::Time last_memory_report = absl::InfinitePast();
    // Set once the outcome has been sent (on the current stream).
    bool outcome_sent = false;
    // Named stale by plateaud: stopped, reported once more, then forgotten.
    bool stale = false;
    absl::Time ended = absl::InfiniteFuture();
  };
  // One Attach stream.
  struct Session {
    std::unique_ptr<v1::WorkerService::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>>
        stream;
    absl::Mutex write_mutex;
    absl::Duration heartbeat_interval = absl::Seconds(2);
    absl::Duration rank_lease = absl::ZeroDuration();  // none
    // Heartbeats not yet acknowledged: sequence -> monotonic send time.
    std::map<int64_t, absl::Duration> unacknowledged
        ABSL_GUARDED_BY(write_mutex);
    bool Send(const v1::WorkerMessage& message);
    // Sends the heartbeat of `sequence` and records when it went.
    bool SendHeartbeat(int64_t sequence);
    // The send time of the heartbeat `sequence`, if this session sent it
    // and it is the newest acknowledgement yet.
    std::optional<absl::Duration> Acknowledged(int64_t sequence);
  };

  // Attaches and serves commands until the stream ends or stop.
  void ServeConnections(const std::atomic<bool>* stop);
  absl::StatusOr<std::shared_ptr<Session>> Attach();
  // Beats until *ended; cancels the stream when a beat cannot be sent or
  // the agent is disconnecting.
  void Heartbeat(Session* session, const std::atomic<bool>* ended);
  void OnStart(const v1::StartAttempt& start);
  // The lease now runs to `expiry` (monotonic; never shortened), written to
  // every running attempt's lease file.
  void ExtendLeaseLocked(absl::Duration expiry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void WriteLease(const std::string& directory, absl::Duration expiry);
  void OnStop(const v1::StopAttempt& stop);
  // Reads status files, sets metrics, relays; forgets old ended attempts.
  void ReportLoop(const std::atomic<bool>* done);
  void ReportOnce();
  // `ended`: whether its ranks had all exited before its lines were sent.
  void ReportAttempt(Session* session, Attempt& attempt, bool ended)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SendLogLines(Session* session);
  void Log(const std::string& line);
  void QueueLine(const v1::AttemptRef& attempt, int rank,
                 const std::string& text);
  std::shared_ptr<Session> CurrentSession();

  const AgentOptions options_;
  WorkerMetrics* const metrics_;
  absl::Mutex log_mutex_;
  std::ostream* const log_ ABSL_GUARDED_BY(log_mutex_);

  // Set when Run is done with plateaud: every stream is to end.
  std::atomic<bool> disconnecting_{false};
  absl::Mutex mutex_;
  std::map<AttemptKey, Attempt> attempts_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mutex_);
  // The ranks' lease expiry (monotonic); unset until plateaud grants one.
  std::optional<absl::Duration> lease_expiry_ ABSL_GUARDED_BY(mutex_);

  absl::Mutex lines_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  std::deque<v1::WorkerLogLine> lines_ ABSL_GUARDED_BY(lines_mutex_);
  int64_t dropped_lines_ ABSL_GUARDED_BY(lines_mutex_) = 0;
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_AGENT_H_
