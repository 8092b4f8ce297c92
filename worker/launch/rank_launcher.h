// Starts the N local rank processes of a standalone run
// (`plateau-worker train SPEC --world N`, like torchrun) and supervises them
// until they have all exited.
//
// Every rank runs the same command with PLATEAU_RANK=i and
// PLATEAU_WORLD_SIZE=N added to the launcher's environment (plus
// LaunchOptions::env), stdin from /dev/null, in its own process group. Each
// line a rank writes to stdout or stderr is passed on to the launcher's
// stdout or stderr as "[rank i] line"; the last kStderrLinesKept stderr lines
// of each rank are kept for the error report.
//
// When a rank exits non-zero or is killed by a signal, every other rank gets
// SIGTERM, then SIGKILL once stop_grace_period has passed. When
// *stop_requested turns true (the caller's SIGINT/SIGTERM handler sets it),
// every rank gets SIGTERM, then SIGKILL after the grace period. Signals go to
// each rank's process group, so a rank's own children are stopped too.
//
// No orphans: on every return path (including a failure to start a rank or
// to read its output) every rank has been reaped and its process group
// SIGKILLed; each rank also dies with the launcher's thread
// (PR_SET_PDEATHSIG = SIGKILL). Call LaunchRanks from a thread that lives
// until it returns, and do not reap its children elsewhere (no
// waitpid(-1, ...) in a SIGCHLD handler).
#ifndef PLATEAU_WORKER_LAUNCH_RANK_LAUNCHER_H_
#define PLATEAU_WORKER_LAUNCH_RANK_LAUNCHER_H_

#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace plateau::worker {

inline constexpr int kStderrLinesKept = 20;

struct LaunchOptions {
  // The command every rank runs; argv[0] is looked up in PATH.
  std::vector<std::string> argv;
  int world_size = 1;
  // This launcher runs global ranks first_rank .. first_rank + local_ranks - 1
  // of the world (a worker agent runs its node's share); local_ranks 0 means
  // every rank from first_rank on. Rank numbers in the environment, the line
  // prefixes and the failure report are global.
  int first_rank = 0;
  int local_ranks = 0;
  // Added to each rank's environment, besides PLATEAU_RANK, PLATEAU_WORLD_SIZE
  // and PLATEAU_LOCAL_RANK (its index among this launcher's ranks, which
  // picks its GPU), which win over entries here.
  std::map<std::string, std::string> env;
  absl::Duration stop_grace_period = absl::Seconds(10);
  // Where the prefixed lines go. Not closed.
  int stdout_fd = STDOUT_FILENO;
  int stderr_fd = STDERR_FILENO;
};

struct RankFailure {
  int rank = -1;
  int exit_code = 0;              // When it exited; 0 when killed by a signal.
  int signal = 0;                 // When killed by a signal; 0 when it exited.
  std::string last_stderr_lines;  // Up to kStderrLinesKept, '\n'-terminated.
};

// "rank 2 exited with code 3; the other ranks were stopped" (or "rank 0 was
// killed by signal 9 (Killed); ..."), then its last stderr lines.
std::string DescribeRankFailure(const RankFailure& failure);

// Runs the ranks to the end. OK when every rank exited 0 (also after a
// requested stop). ABORTED naming the first rank that failed on its own (its
// exit code or signal and last stderr lines), also stored in *first_failure
// when given. CANCELLED when a requested stop ended some rank non-zero or by
// a signal. INVALID_ARGUMENT for bad options; INTERNAL when a rank cannot be
// started (the ranks already started are stopped and reaped).
// stop_requested may be null.
absl::Status LaunchRanks(const LaunchOptions& options,
                         const std::atomic<bool>* stop_requested,
                         RankFailure* first_failure = nullptr);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_LAUNCH_RANK_LAUNCHER_H_
