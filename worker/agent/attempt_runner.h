// One attempt's share of ranks on this node. Start launches them (with
// LaunchRanks, rank_launcher.h) from a thread of its own and returns; every
// line they print goes to the sink and to <directory>/ranks.log; Stop ends
// them (SIGTERM, then SIGKILL after the grace period); once Done, Outcome
// says how they ended as the AttemptStatus the agent reports:
//   every rank exited 0                     -> SUCCEEDED
//   Stop was called (whatever the exits)    -> STOPPED
//   a rank failed or could not start        -> FAILED, naming the rank, its
//                                              exit code and last stderr
// The destructor stops the ranks and waits for them: no rank outlives its
// runner. Thread-safe.
#ifndef PLATEAU_WORKER_AGENT_ATTEMPT_RUNNER_H_
#define PLATEAU_WORKER_AGENT_ATTEMPT_RUNNER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace plateau::worker {

// What to run: global ranks first_rank .. first_rank + local_ranks - 1 of
// world_size, each `argv` with `env` added.
struct RankCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  int world_size = 1;
  int first_rank = 0;
  int local_ranks = 1;
  absl::Duration stop_grace_period = absl::Seconds(30);
  // Exists; holds ranks.log and the ranks' status files.
  std::string directory;
};

// Receives each line a rank prints (without its newline), from the runner's
// reader thread.
using RankLineSink = std::function<void(int rank, const std::string& text)>;

class AttemptRunner {
 public:
  static absl::StatusOr<std::unique_ptr<AttemptRunner>> Start(
      const v1::AttemptRef& attempt, RankCommand command, RankLineSink sink);
  ~AttemptRunner();

  const v1::AttemptRef& attempt() const { return attempt_; }
  const RankCommand& command() const { return command_; }

  // Idempotent.
  void Stop();
  bool Done() const;
  // REQUIRES: Done().
  v1::AttemptStatus Outcome() const;
  // The newest status file of each local rank that has written one.
  std::vector<v1::RankStatus> RankStatuses() const;

 private:
  AttemptRunner(const v1::AttemptRef& attempt, RankCommand command,
                RankLineSink sink);
  void Run(int output_fd);
  void ReadLines(int input_fd);

  const v1::AttemptRef attempt_;
  const RankCommand command_;
  const RankLineSink sink_;
  std::atomic<bool> stop_requested_{false};
  mutable absl::Mutex mutex_;
  bool done_ ABSL_GUARDED_BY(mutex_) = false;
  v1::AttemptStatus outcome_ ABSL_GUARDED_BY(mutex_);
  std::thread reader_;
  std::thread launcher_;
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_ATTEMPT_RUNNER_H_
