// Prints the course of a job for `submit --watch` and `logs -f`.
//
// On a terminal one live progress line (job_view.h's ProgressLine) is
// redrawn in place with '\r' and clear-to-end-of-line, always below the
// lines printed so far; elsewhere only plain lines are printed: one per
// state change and at most one progress line per distinct step, never a
// carriage return. Events and other lines print as their own lines in both
// modes. Finish replaces everything live with the final state line; later
// calls print nothing. Thread-safe: several threads may print at once.
#ifndef PLATEAU_CLIENT_PROGRESS_PRINTER_H_
#define PLATEAU_CLIENT_PROGRESS_PRINTER_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"

namespace plateau::client {

class ProgressPrinter {
 public:
  struct Options {
    // Redraw one live line instead of printing plain lines.
    bool terminal = false;
    // Columns of the terminal; a longer live line is cut to fit (0: no cut).
    int width = 0;
    // Print JobEvents given to Event (off when the caller prints them from
    // another source, as `logs -f` does).
    bool print_events = true;
  };

  // `out` must outlive the printer.
  ProgressPrinter(std::ostream& out, Options options);

  // The job as it is now.
  void Update(const v1::Job& job);
  // An event of the job: "[time] EVENT KIND: message".
  void Event(const v1::JobEvent& event);
  // Any other line (a log line), printed above the live line.
  void Line(absl::string_view text);
  // Clears the live line and prints FinalLine(job).
  void Finish(const v1::Job& job);

 private:
  void PrintLineLocked(absl::string_view text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void DrawLiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const Options options_;
  absl::Mutex mutex_;
  std::ostream& out_ ABSL_GUARDED_BY(mutex_);
  // The live line on screen ("" when none); terminal mode only.
  std::string live_ ABSL_GUARDED_BY(mutex_);
  v1::JobState last_state_ ABSL_GUARDED_BY(mutex_) = v1::JOB_STATE_UNSPECIFIED;
  int64_t last_step_ ABSL_GUARDED_BY(mutex_) = 0;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_PROGRESS_PRINTER_H_
