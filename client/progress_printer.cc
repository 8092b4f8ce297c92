#include "client/progress_printer.h"

#include "client/format.h"
#include "client/job_view.h"

namespace plateau::client {
namespace {

// Back to column 0 and erase to the end of the line (ANSI "EL").
constexpr absl::string_view kClearLine = "\r\x1b[K";

}  // namespace

ProgressPrinter::ProgressPrinter(std::ostream& out, Options options)
    : options_(options), out_(out) {}

void ProgressPrinter::Update(const v1::Job& job) {
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  if (options_.terminal) {
    live_ = TerminalSafe(ProgressLine(job));
    if (options_.width > 0 &&
        live_.size() >= static_cast<size_t>(options_.width)) {
      // One column short of the edge: a full line would wrap on some
      // terminals and '\r' would then redraw only its last row.
      live_.resize(options_.width - 1);
    }
    DrawLiveLocked();
    return;
  }
  // The final state is Finish's line.
  if (job.state() != last_state_ && !IsFinalState(job.state())) {
    last_state_ = job.state();
    out_ << TerminalSafe(StateLine(job)) << "\n";
  }
  const int64_t step = job.progress().step();
  if (step > 0 && step != last_step_ && !IsFinalState(job.state())) {
    last_step_ = step;
    out_ << TerminalSafe(ProgressLine(job)) << "\n";
  }
  out_.flush();
}

void ProgressPrinter::Event(const v1::JobEvent& event) {
  if (!options_.print_events) return;
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  PrintLineLocked(EventLine(event));
}

void ProgressPrinter::Line(absl::string_view text) {
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  PrintLineLocked(text);
}

void ProgressPrinter::Finish(const v1::Job& job) {
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  finished_ = true;
  if (!live_.empty()) out_ << kClearLine;
  live_.clear();
  out_ << TerminalSafe(FinalLine(job)) << "\n";
  out_.flush();
}

void ProgressPrinter::PrintLineLocked(absl::string_view text) {
  if (!live_.empty()) out_ << kClearLine;
  out_ << TerminalSafe(text) << "\n";
  DrawLiveLocked();
}

void ProgressPrinter::DrawLiveLocked() {
  if (!live_.empty()) out_ << kClearLine << live_;
  out_.flush();
}

}  // namespace plateau::client
