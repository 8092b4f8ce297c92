#include "client/progress_printer.h"

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

v1::Job JobAt(v1::JobState state, int64_t step) {
  v1::Job job;
  job.set_id("j-1");
  job.set_state(state);
  job.mutable_progress()->set_step(step);
  job.mutable_progress()->set_total_steps(10);
  job.mutable_progress()->set_loss(2.5);
  return job;
}

v1::JobEvent EventOf(v1::JobEventKind kind, const std::string& message) {
  v1::JobEvent event;
  event.set_kind(kind);
  event.set_message(message);
  return event;
}

ProgressPrinter::Options Terminal(int width = 0) {
  ProgressPrinter::Options options;
  options.terminal = true;
  options.width = width;
  return options;
}

TEST(ProgressPrinterTest, PlainOutputHasOneLinePerStateAndStep) {
  std::ostringstream out;
  ProgressPrinter printer(out, ProgressPrinter::Options());
  printer.Update(JobAt(v1::JOB_STATE_QUEUED, 0));
  printer.Update(JobAt(v1::JOB_STATE_QUEUED, 0));
  printer.Event(EventOf(v1::JOB_EVENT_KIND_STARTED, "on node-a"));
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 0));
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 3));
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 3));  // same step: no line
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 4));
  printer.Update(JobAt(v1::JOB_STATE_SUCCEEDED, 10));  // Finish's line
  printer.Finish(JobAt(v1::JOB_STATE_SUCCEEDED, 10));
  printer.Update(JobAt(v1::JOB_STATE_SUCCEEDED, 10));  // after Finish: nothing
  const std::string text = out.str();
  EXPECT_THAT(text, Not(HasSubstr("\r")));
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_THAT(
      absl::StrSplit(text, '\n'),
      ElementsAre("j-1 QUEUED", "[-] EVENT STARTED: on node-a", "j-1 RUNNING",
                  "j-1 RUNNING [######..............] 3/10  loss 2.5000",
                  "j-1 RUNNING [########............] 4/10  loss 2.5000",
                  "j-1 SUCCEEDED [####################] 10/10  loss 2.5000",
                  ""));
}

TEST(ProgressPrinterTest, TerminalRedrawsOneLiveLine) {
  std::ostringstream out;
  ProgressPrinter printer(out, Terminal());
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 3));
  EXPECT_EQ(out.str(),
            "\r\x1b[Kj-1 RUNNING [######..............] 3/10  loss 2.5000");
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 4));
  EXPECT_THAT(out.str(), Not(HasSubstr("\n")));
  EXPECT_TRUE(absl::EndsWith(
      out.str(),
      "\r\x1b[Kj-1 RUNNING [########............] 4/10  loss 2.5000"));
}

TEST(ProgressPrinterTest, TerminalPrintsLinesAboveTheLiveLine) {
  std::ostringstream out;
  ProgressPrinter printer(out, Terminal());
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 4));
  out.str("");
  printer.Line("[node-a rank 0] hello");
  EXPECT_EQ(out.str(),
            "\r\x1b[K[node-a rank 0] hello\n"
            "\r\x1b[Kj-1 RUNNING [########............] 4/10  loss 2.5000");
  out.str("");
  printer.Event(EventOf(v1::JOB_EVENT_KIND_CHECKPOINTED, "step 4"));
  EXPECT_THAT(out.str(), HasSubstr("\r\x1b[K[-] EVENT CHECKPOINTED: step 4\n"));
  out.str("");
  printer.Finish(JobAt(v1::JOB_STATE_SUCCEEDED, 10));
  EXPECT_EQ(out.str(),
            "\r\x1b[Kj-1 SUCCEEDED [####################] 10/10  loss "
            "2.5000\n");
}

TEST(ProgressPrinterTest, TerminalLineIsCutToTheWidth) {
  std::ostringstream out;
  ProgressPrinter printer(out, Terminal(/*width=*/20));
  printer.Update(JobAt(v1::JOB_STATE_RUNNING, 4));
  EXPECT_EQ(out.str(), "\r\x1b[Kj-1 RUNNING [######");
}

TEST(ProgressPrinterTest, EventsCanBeLeftToTheCaller) {
  std::ostringstream out;
  ProgressPrinter::Options options;
  options.print_events = false;
  ProgressPrinter printer(out, options);
  printer.Event(EventOf(v1::JOB_EVENT_KIND_STARTED, "x"));
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressPrinterTest, LinesFromManyThreadsStayWhole) {
  std::ostringstream out;
  ProgressPrinter printer(out, Terminal());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&printer, t] {
      for (int i = 0; i < 100; ++i) {
        printer.Line(absl::StrCat("thread ", t, " line ", i));
        printer.Update(JobAt(v1::JOB_STATE_RUNNING, i % 10));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(out.str(), '\n')) {
    if (!absl::StrContains(line, "thread ")) continue;
    ++lines;
    // What a terminal shows of the row: the text after the last clear. It
    // is one whole log line, never mixed with the progress line.
    // (No clear before the first line: nothing was live yet.)
    const size_t clear = line.rfind("\r\x1b[K");
    const absl::string_view shown =
        clear == absl::string_view::npos ? line : line.substr(clear + 4);
    EXPECT_TRUE(absl::StartsWith(shown, "thread ")) << line;
    EXPECT_FALSE(absl::StrContains(shown, "RUNNING")) << line;
  }
  EXPECT_EQ(lines, 400);
}

}  // namespace
}  // namespace plateau::client
