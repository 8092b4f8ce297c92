#include "daemon/jobs/job_mentions.h"

#include <string>

#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

// ada may see j-00000001 and j-00000003; j-00000002 and j-00000004 are
// bob's.
bool AdasView(const std::string& job_id) {
  return job_id == "j-00000001" || job_id == "j-00000003";
}

TEST(JobMentionsTest, AnotherUsersJobAndUserReadAsAnotherUsersJob) {
  EXPECT_EQ(HideUnshownJobs("behind job j-00000002 (reserved to start in 12m)",
                            AdasView),
            "behind another user's job (reserved to start in 12m)");
  EXPECT_EQ(HideUnshownJobs("behind job j-00000003 (reserved to start in 12m)",
                            AdasView),
            "behind job j-00000003 (reserved to start in 12m)");
  // The victim's history names the preemptor and its user.
  EXPECT_EQ(
      HideUnshownJobs("attempt 1 preempted: job j-00000004 (priority 100, "
                      "user bob) needs 8 devices on 1 node; 0 free; job "
                      "j-00000001 has priority 10",
                      AdasView),
      "attempt 1 preempted: another user's job (priority 100) needs 8 "
      "devices on 1 node; 0 free; job j-00000001 has priority 10");
  // The preemptor's names its victims.
  EXPECT_EQ(HideUnshownJobs("preempting jobs j-00000002 (priority 0), "
                            "j-00000003 (priority 0) for 4 devices on 1 node",
                            AdasView),
            "preempting jobs: another user's job (priority 0), j-00000003 "
            "(priority 0) for 4 devices on 1 node");
  EXPECT_EQ(HideUnshownJobs("waiting for 8 devices on 1 node; 0 free, 8 "
                            "coming free from stopping job j-00000004",
                            AdasView),
            "waiting for 8 devices on 1 node; 0 free, 8 coming free from "
            "stopping another user's job");
  // Every job shown (an admin's view, JobShown empty): the text as written.
  const std::string text =
      "job j-00000004 (priority 100, user bob) needs 8 devices";
  EXPECT_EQ(HideUnshownJobs(text, [](const std::string&) { return true; }),
            text);
  EXPECT_EQ(HideUnshownJobs(text, JobShown()), text);
}

TEST(JobMentionsTest, AJobsWaitReasonErrorAndEventsAreHidden) {
  v1::Job job;
  job.set_wait_reason("behind job j-00000002 (start time unknown)");
  job.set_last_error("preempted for job j-00000004");
  HideUnshownJobs(AdasView, &job);
  EXPECT_EQ(job.wait_reason(),
            "behind another user's job (start time unknown)");
  EXPECT_EQ(job.last_error(), "preempted for another user's job");
  v1::JobEvent event;
  event.set_message(
      "preempting job j-00000002: job j-00000001 (priority "
      "100, user ada) needs 8 devices");
  HideUnshownJobs(AdasView, &event);
  EXPECT_EQ(event.message(),
            "preempting another user's job: job j-00000001 (priority 100, "
            "user ada) needs 8 devices");
}

}  // namespace
}  // namespace plateau::daemon
