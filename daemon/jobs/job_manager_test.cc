#include "daemon/jobs/job_manager.h"

#include <string>
#include <vector>

#include "daemon/store/memory_store.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

v1::JobSpec Spec(int max_restarts = 1) {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.mutable_resources()->set_nodes(1);
  spec.mutable_resources()->set_devices_per_node(2);
  spec.mutable_train()->set_steps(100);
  spec.mutable_train()->set_max_restarts(max_restarts);
  return spec;
}

v1::Allocation OneNode(const std::string& node) {
  v1::Allocation allocation;
  v1::NodeAllocation& entry = *allocation.add_nodes();
  entry.set_node(node);
  entry.add_device_indices(0);
  entry.add_device_indices(1);
  allocation.set_world_size(2);
  return allocation;
}

class JobManagerTest : public ::testing::Test {
 protected:
  JobManagerTest() { Reopen(); }

  // A fresh manager over the same store, as after a daemon restart.
  void Reopen() {
    manager_ = JobManager::Open(&store_, [this] { return now_; }).value();
  }

  std::vector<v1::JobEventKind> EventKinds(const std::string& job_id) {
    std::vector<v1::JobEventKind> kinds;
    EXPECT_TRUE(manager_
                    ->ReadLog(job_id, 0,
                              [&](const v1::LogEntry& entry) {
                                if (entry.has_event()) {
                                  kinds.push_back(entry.event().kind());
                                }
                                return true;
                              })
                    .ok());
    return kinds;
  }

  MemoryStore store_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobManagerTest, SubmitAssignsIdsAndRecordsTheEvent) {
  auto first = manager_->Submit(Spec(), "yaml: 1", "ada", "");
  auto second = manager_->Submit(Spec(), "yaml: 2", "bob", "");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->id(), "j-00000001");
  EXPECT_EQ(second->id(), "j-00000002");
  EXPECT_EQ(first->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(first->owner(), "ada");
  EXPECT_EQ(first->progress().total_steps(), 100);
  EXPECT_EQ(EventKinds(first->id()),
            std::vector<v1::JobEventKind>{v1::JOB_EVENT_KIND_SUBMITTED});
}

TEST_F(JobManagerTest, IdempotencyKeyReturnsTheSameJobPerOwner) {
  auto first = manager_->Submit(Spec(), "", "ada", "key-1");
  auto again = manager_->Submit(Spec(), "", "ada", "key-1");
  auto other_owner = manager_->Submit(Spec(), "", "bob", "key-1");
  ASSERT_TRUE(first.ok() && again.ok() && other_owner.ok());
  EXPECT_EQ(first->id(), again->id());
  EXPECT_NE(first->id(), other_owner->id());
  Reopen();
  auto after_restart = manager_->Submit(Spec(), "", "ada", "key-1");
  EXPECT_EQ(after_restart->id(), first->id());
}

TEST_F(JobManagerTest, SuccessfulLifecycle) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  auto scheduled = manager_->Schedule({{id, OneNode("node-a")}});
  ASSERT_TRUE(scheduled.ok());
  ASSERT_EQ(scheduled->size(), 1u);
  EXPECT_EQ((*scheduled)[0].attempt(), 1);
  EXPECT_EQ((*scheduled)[0].state(), v1::JOB_STATE_SCHEDULED);
  ASSERT_TRUE(manager_->MarkRunning(id, 1).ok());
  v1::JobProgress progress;
  progress.set_step(50);
  progress.set_loss(3.5);
  ASSERT_TRUE(manager_->RecordProgress(id, 1, progress).ok());
  ASSERT_TRUE(manager_->RecordCheckpoint(id, 1, 50, "/ck/50").ok());
  auto ended = manager_->EndAttempt(id, 1, AttemptOutcome::kSucceeded, "");
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(ended->progress().step(), 50);
  EXPECT_EQ(ended->progress().checkpoint_step(), 50);
  EXPECT_TRUE(ended->allocation().nodes().empty());
  EXPECT_EQ(EventKinds(id),
            (std::vector<v1::JobEventKind>{
                v1::JOB_EVENT_KIND_SUBMITTED, v1::JOB_EVENT_KIND_SCHEDULED,
                v1::JOB_EVENT_KIND_STARTED, v1::JOB_EVENT_KIND_CHECKPOINTED,
                v1::JOB_EVENT_KIND_SUCCEEDED}));
}

TEST_F(JobManagerTest, FailuresRequeueUntilRestartsRunOut) {
  const std::string id =
      manager_->Submit(Spec(/*max_restarts=*/1), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  ASSERT_TRUE(manager_->RecordCheckpoint(id, 1, 20, "/ck/20").ok());
  auto requeued = manager_->EndAttempt(id, 1, AttemptOutcome::kFailed, "boom");
  EXPECT_EQ(requeued->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(requeued->restarts(), 1);
  EXPECT_EQ(requeued->last_error(), "boom");
  // A stale report of the old attempt changes nothing.
  auto stale = manager_->EndAttempt(id, 1, AttemptOutcome::kSucceeded, "");
  EXPECT_EQ(stale->state(), v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("b")}}).ok());
  auto failed = manager_->EndAttempt(id, 2, AttemptOutcome::kFailed, "again");
  EXPECT_EQ(failed->state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed->last_error(), "again");
  EXPECT_EQ(EventKinds(id),
            (std::vector<v1::JobEventKind>{
                v1::JOB_EVENT_KIND_SUBMITTED, v1::JOB_EVENT_KIND_SCHEDULED,
                v1::JOB_EVENT_KIND_CHECKPOINTED,
                v1::JOB_EVENT_KIND_ATTEMPT_FAILED, v1::JOB_EVENT_KIND_REQUEUED,
                v1::JOB_EVENT_KIND_SCHEDULED, v1::JOB_EVENT_KIND_FAILED}));
}

TEST_F(JobManagerTest, CancelQueuedAtOnceAndRunningThroughCancelling) {
  const std::string queued = manager_->Submit(Spec(), "", "ada", "")->id();
  EXPECT_EQ(manager_->RequestCancel(queued, "no")->state(),
            v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(manager_->RequestCancel(queued, "").status().code(),
            absl::StatusCode::kFailedPrecondition);

  const std::string running = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{running, OneNode("a")}}).ok());
  EXPECT_EQ(manager_->RequestCancel(running, "")->state(),
            v1::JOB_STATE_CANCELLING);
  auto ended = manager_->EndAttempt(running, 1, AttemptOutcome::kStopped, "");
  EXPECT_EQ(ended->state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, ReopenRestoresJobsLogsAndTheIdCounter) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  v1::WorkerLogLine line;
  line.set_job_id(id);
  line.set_text("hello from rank 0");
  ASSERT_TRUE(manager_->AppendLogLines(id, {line, line}).ok());
  const v1::Job before = manager_->Get(id).value();
  Reopen();
  const v1::Job after = manager_->Get(id).value();
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  int lines = 0;
  ASSERT_TRUE(manager_
                  ->ReadLog(id, 0,
                            [&](const v1::LogEntry& entry) {
                              lines += entry.has_line();
                              return true;
                            })
                  .ok());
  EXPECT_EQ(lines, 2);
  EXPECT_EQ(manager_->Submit(Spec(), "", "ada", "")->id(), "j-00000002");
}

TEST_F(JobManagerTest, ListsNewestFirstWithFiltersAndPages) {
  for (int i = 0; i < 5; ++i) {
    manager_->Submit(Spec(), "", i % 2 ? "bob" : "ada", "").value();
  }
  manager_->RequestCancel("j-00000003", "").value();
  JobListFilter filter;
  filter.page_size = 2;
  auto page = manager_->List(filter).value();
  ASSERT_EQ(page.jobs.size(), 2u);
  EXPECT_EQ(page.jobs[0].id(), "j-00000005");
  EXPECT_EQ(page.jobs[1].id(), "j-00000004");
  filter.page_token = page.next_page_token;
  page = manager_->List(filter).value();
  EXPECT_EQ(page.jobs[0].id(), "j-00000003");
  filter = JobListFilter();
  filter.owner = "ada";
  filter.states = {v1::JOB_STATE_QUEUED};
  page = manager_->List(filter).value();
  ASSERT_EQ(page.jobs.size(), 2u);  // j-5 and j-1 (j-3 was cancelled)
  EXPECT_EQ(page.jobs[0].id(), "j-00000005");
  EXPECT_EQ(page.jobs[1].id(), "j-00000001");
  EXPECT_TRUE(page.next_page_token.empty());
  filter.page_token = "garbage";
  EXPECT_EQ(manager_->List(filter).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(JobManagerTest, WaitReasonsAndVersionsTrackChanges) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  const int64_t version = manager_->Version(id);
  manager_->SetWaitReasons({{id, "behind job j-00000007"}});
  EXPECT_GT(manager_->Version(id), version);
  EXPECT_EQ(manager_->Get(id)->wait_reason(), "behind job j-00000007");
  EXPECT_EQ(manager_->WaitForChange(id, manager_->Version(id),
                                    absl::Milliseconds(10)),
            manager_->Version(id));
}

}  // namespace
}  // namespace plateau::daemon
