#include "daemon/jobs/job_manager.h"

#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  void Reopen(const JobLimits& limits = {}) {
    manager_ = JobManager::Open(
                   &store_, [this] { return now_; }, limits)
                   .value();
  }

  static JobLimits LogLinesPerJob(int64_t lines) {
    JobLimits limits;
    limits.max_log_lines_per_job = lines;
    return limits;
  }

  std::vector<v1::LogEntry> Log(const std::string& job_id,
                                int64_t after_sequence = 0) {
    std::vector<v1::LogEntry> entries;
    EXPECT_TRUE(manager_
                    ->ReadLog(job_id, after_sequence,
                              [&](const v1::LogEntry& entry) {
                                entries.push_back(entry);
                                return true;
                              })
                    .ok());
    return entries;
  }

  static v1::WorkerLogLine Line(const std::string& job_id, int32_t attempt,
                                const std::string& text) {
    v1::WorkerLogLine line;
    line.set_job_id(job_id);
    line.set_attempt(attempt);
    line.set_text(text);
    return line;
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

// A store whose writes fail while `full` is set, as on a full disk.
class FullDiskStore : public Store {
 public:
  bool full = false;

  absl::Status Write(const WriteBatch& batch,
                     const WriteOptions& options) override {
    if (full) {
      return absl::ResourceExhaustedError(
          "store /var/lib/plateau: write: No space left on device");
    }
    return base_.Write(batch, options);
  }
  absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) override {
    return base_.Get(key);
  }
  absl::Status Scan(
      absl::string_view prefix,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) override {
    return base_.Scan(prefix, visit);
  }
  absl::Status ScanAfter(
      absl::string_view prefix, absl::string_view start_after,
      const std::function<bool(absl::string_view key, absl::string_view value)>&
          visit) override {
    return base_.ScanAfter(prefix, start_after, visit);
  }

 private:
  MemoryStore base_;
};

// A change the store refused is refused to the caller too, and never
// shows: what plateaud answered is what a restart finds.
TEST(JobManagerStoreFaultTest, AChangeTheStoreRefusesIsNeitherShownNorLost) {
  FullDiskStore store;
  const auto clock = [] { return absl::FromUnixSeconds(1000); };
  std::unique_ptr<JobManager> manager = JobManager::Open(&store, clock).value();
  const absl::StatusOr<v1::Job> kept =
      manager->Submit(Spec(), "yaml: 1", "ada", "key-1");
  ASSERT_TRUE(kept.ok()) << kept.status();

  store.full = true;
  const absl::StatusOr<v1::Job> refused =
      manager->Submit(Spec(), "yaml: 2", "ada", "key-2");
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("No space left"),
            std::string::npos);
  const absl::StatusOr<v1::Job> not_cancelled =
      manager->RequestCancel(kept->id(), "full disk");
  EXPECT_TRUE(absl::IsResourceExhausted(not_cancelled.status()));
  EXPECT_EQ(manager->Get(kept->id())->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(manager->List({}).value().jobs.size(), 1u);

  // Room again: the retried submission (same key) is created once.
  store.full = false;
  const absl::StatusOr<v1::Job> retried =
      manager->Submit(Spec(), "yaml: 2", "ada", "key-2");
  ASSERT_TRUE(retried.ok()) << retried.status();
  manager = JobManager::Open(&store, clock).value();
  const JobPage page = manager->List({}).value();
  ASSERT_EQ(page.jobs.size(), 2u);
  for (const v1::Job& job : page.jobs) {
    EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED) << job.id();
  }
  EXPECT_EQ(manager->FindSubmitted("ada", "key-2")->id(), retried->id());
}

TEST_F(JobManagerTest, SubmitAssignsIdsAndRecordsTheEvent) {
  auto first = manager_->Submit(Spec(), "yaml: 1", "ada", "");
  auto second = manager_->Submit(Spec(), "yaml: 2", "bob", "");
  ASSERT_TRUE(first.ok() && second.ok());
  // 64 random bits in 13 base-32 digits: nothing counts submissions.
  EXPECT_TRUE(
      std::regex_match(first->id(), std::regex("j-[0-9a-hjkmnp-tv-z]{13}")))
      << first->id();
  EXPECT_NE(first->id(), second->id());
  EXPECT_GT(manager_->SubmissionOrder(second->id()),
            manager_->SubmissionOrder(first->id()));
  EXPECT_EQ(first->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(first->owner(), "ada");
  EXPECT_EQ(first->progress().total_steps(), 100);
  EXPECT_EQ(EventKinds(first->id()),
            std::vector<v1::JobEventKind>{v1::JOB_EVENT_KIND_SUBMITTED});
}

TEST_F(JobManagerTest, SubmitKeepsThePlanAndSumsItUpInTheEvent) {
  v1::MemoryPlan plan;
  plan.set_device_memory_bytes(int64_t{1} << 30);
  plan.set_fits(true);
  plan.set_schedules_chosen(true);
  plan.mutable_planned()->set_device_peak_bytes(int64_t{100} << 20);
  plan.mutable_planned()->set_schedules("ring_dtp, sco");
  auto job = manager_->Submit(Spec(), "", "ada", "", nullptr, &plan);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan().SerializeAsString(), plan.SerializeAsString());
  Reopen();
  EXPECT_TRUE(manager_->Get(job->id())->plan().fits());
  const std::vector<v1::LogEntry> log = Log(job->id());
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log[0].event().message(),
            "submitted by ada; planned device peak 100.00 MiB of 1.00 GiB "
            "devices (schedules chosen: ring_dtp, sco)");
}

TEST_F(JobManagerTest, IdempotencyKeyReturnsTheSameJobPerOwner) {
  auto first = manager_->Submit(Spec(), "", "ada", "key-1");
  auto again = manager_->Submit(Spec(), "", "ada", "key-1");
  auto other_owner = manager_->Submit(Spec(), "", "bob", "key-1");
  ASSERT_TRUE(first.ok() && again.ok() && other_owner.ok());
  EXPECT_EQ(first->id(), again->id());
  EXPECT_NE(first->id(), other_owner->id());
  EXPECT_EQ(manager_->FindSubmitted("ada", "key-1")->id(), first->id());
  EXPECT_TRUE(
      absl::IsNotFound(manager_->FindSubmitted("ada", "key-2").status()));
  Reopen();
  auto after_restart = manager_->Submit(Spec(), "", "ada", "key-1");
  EXPECT_EQ(after_restart->id(), first->id());
  EXPECT_EQ(manager_->FindSubmitted("bob", "key-1")->id(), other_owner->id());
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
  ASSERT_TRUE(manager_->RecordReadopted(id, 1, "node-a").ok());
  ASSERT_TRUE(manager_->RecordReadopted(id, 2, "node-a").ok());  // stale
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
                v1::JOB_EVENT_KIND_READOPTED, v1::JOB_EVENT_KIND_SUCCEEDED}));
}

// Each rank's report replaces its own entry; a stale attempt's is ignored;
// the record survives a restart.
TEST_F(JobManagerTest, MemoryIsKeptPerRank) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("node-a")}}).ok());
  auto rank_memory = [](int32_t rank, int64_t peak_bytes) {
    v1::RankMemory memory;
    memory.set_rank(rank);
    v1::MemoryUsage& usage = *memory.add_usage();
    usage.set_pool(v1::MEMORY_POOL_DEVICE);
    usage.set_component(v1::MEMORY_COMPONENT_DISPATCH);
    usage.set_peak_bytes(peak_bytes);
    return memory;
  };
  ASSERT_TRUE(
      manager_->RecordMemory(id, 1, {rank_memory(1, 10), rank_memory(0, 20)})
          .ok());
  ASSERT_TRUE(manager_->RecordMemory(id, 1, {rank_memory(1, 30)}).ok());
  ASSERT_TRUE(manager_->RecordMemory(id, 2, {rank_memory(0, 99)}).ok());
  Reopen();
  const v1::Job job = *manager_->Get(id);
  ASSERT_EQ(job.memory_size(), 2);
  EXPECT_EQ(job.memory(0).rank(), 0);
  EXPECT_EQ(job.memory(0).usage(0).peak_bytes(), 20);
  EXPECT_EQ(job.memory(1).rank(), 1);
  EXPECT_EQ(job.memory(1).usage(0).peak_bytes(), 30);
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

std::string Layouts(const v1::Job& job) {
  std::vector<std::string> layouts;
  for (const v1::AttemptLayout& layout : job.attempt_layouts()) {
    layouts.push_back(
        absl::StrCat(layout.first_attempt(), "-", layout.last_attempt(), ": ",
                     layout.nodes(), "x", layout.devices_per_node(), " ep ",
                     layout.ep(), " pp ", layout.pp(), " dp ", layout.dp()));
  }
  return absl::StrJoin(layouts, ", ");
}

// Each run of attempts with one layout is kept: an elastic job's attempt on
// one of its two nodes runs dp 1, and its SCHEDULED event says so; a job
// requeued forever keeps a bounded list.
TEST_F(JobManagerTest, EachAttemptsLayoutIsKept) {
  v1::JobSpec spec = Spec(/*max_restarts=*/3);
  spec.mutable_resources()->set_nodes(2);
  spec.mutable_resources()->set_min_nodes(1);
  spec.mutable_parallel()->set_ep(2);
  spec.mutable_parallel()->set_pp(1);
  spec.mutable_parallel()->set_dp(2);
  const std::string id = manager_->Submit(spec, "", "ada", "")->id();
  v1::Allocation two_nodes = OneNode("a");
  *two_nodes.add_nodes() = OneNode("b").nodes(0);
  two_nodes.mutable_nodes(1)->set_first_rank(2);
  two_nodes.set_world_size(4);
  int32_t attempt = 0;
  const auto place = [&](const v1::Allocation& allocation) {
    const std::vector<v1::Job> scheduled =
        manager_->Schedule({{id, allocation}}).value();
    EXPECT_EQ(scheduled.size(), 1u);
    ++attempt;
    EXPECT_TRUE(manager_
                    ->EndAttempt(id, attempt, AttemptOutcome::kNotStarted,
                                 "node unreachable")
                    .ok());
    return scheduled.empty() ? v1::Job() : scheduled[0];
  };
  place(two_nodes);
  const v1::Job second = place(OneNode("a"));
  EXPECT_EQ(Layouts(second),
            "1-1: 2x2 ep 2 pp 1 dp 2, 2-2: 1x2 ep 2 pp 1 dp 1");
  // The spec keeps its range: the layout is the attempt's.
  EXPECT_EQ(second.spec().resources().nodes(), 2);
  EXPECT_EQ(second.spec().parallel().dp(), 2);
  std::vector<std::string> scheduled_events;
  for (const v1::LogEntry& entry : Log(id)) {
    if (entry.event().kind() == v1::JOB_EVENT_KIND_SCHEDULED) {
      scheduled_events.push_back(entry.event().message());
    }
  }
  EXPECT_EQ(absl::StrJoin(scheduled_events, "\n"),
            "attempt 1 on a[0,1] b[0,1]; elastic: 2 of 2 nodes, dp 2\n"
            "attempt 2 on a[0,1]; elastic: 1 of 2 nodes, dp 1");
  EXPECT_EQ(Layouts(place(OneNode("b"))),
            "1-1: 2x2 ep 2 pp 1 dp 2, 2-3: 1x2 ep 2 pp 1 dp 1");
  // Alternating sizes keep the last 64 runs.
  v1::Job last;
  for (int i = 0; i < 100; ++i)
    last = place(i % 2 == 0 ? two_nodes : OneNode("a"));
  EXPECT_EQ(last.attempt_layouts_size(), 64);
  EXPECT_EQ(last.attempt_layouts(63).last_attempt(), attempt);
  // A placement at a size the layout cannot take leaves the job queued.
  v1::Allocation three_nodes = two_nodes;
  *three_nodes.add_nodes() = OneNode("c").nodes(0);
  EXPECT_TRUE(manager_->Schedule({{id, three_nodes}}).value().empty());
  EXPECT_EQ(manager_->Get(id)->state(), v1::JOB_STATE_QUEUED);
}

// The first attempt's choice for precision: auto is kept with the job: its
// fp32 spec, YAML and plan where it chose fp32, the reason, an event; a
// requeue changes none of it.
TEST_F(JobManagerTest, TheFirstAttemptsPrecisionIsKept) {
  v1::MemoryPlan bf16_plan;
  bf16_plan.set_precision("bf16");
  bf16_plan.set_precision_reason("auto, planned in bf16");
  v1::PlannedSpec fp32;
  *fp32.mutable_spec() = Spec();
  fp32.mutable_spec()->set_precision(v1::PRECISION_FP32);
  fp32.set_spec_yaml("precision: fp32 as planned");
  fp32.mutable_plan()->set_precision("fp32");
  fp32.mutable_plan()->set_precision_reason("auto, planned in fp32");
  const std::string id =
      manager_->Submit(Spec(), "yaml", "ada", "", nullptr, &bf16_plan, &fp32)
          ->id();
  EXPECT_TRUE(manager_->Get(id)->has_fp32_alternative());
  PlacedJob placed{id, OneNode("a")};
  placed.precision = v1::PRECISION_FP32;
  placed.precision_reason = "auto: bf16 products 0.90x fp32's on a";
  ASSERT_TRUE(manager_->Schedule({placed}).ok());
  Reopen();
  const v1::Job chosen = manager_->Get(id).value();
  EXPECT_EQ(chosen.spec().precision(), v1::PRECISION_FP32);
  EXPECT_EQ(chosen.spec_yaml(), "precision: fp32 as planned");
  EXPECT_EQ(chosen.plan().precision(), "fp32");
  EXPECT_EQ(chosen.plan().precision_reason(), placed.precision_reason);
  EXPECT_EQ(chosen.precision_reason(), placed.precision_reason);
  EXPECT_FALSE(chosen.has_fp32_alternative());
  std::vector<v1::LogEntry> log = Log(id);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1].event().message(),
            "attempt 1 on a[0,1]; precision fp32 (auto: bf16 products "
            "0.90x fp32's on a)");

  // Requeued onto another node, whatever it offers: fp32 still.
  ASSERT_TRUE(manager_->EndAttempt(id, 1, AttemptOutcome::kFailed, "x").ok());
  PlacedJob again{id, OneNode("b")};
  again.precision = v1::PRECISION_BF16;
  again.precision_reason = "auto: bf16 products 3.40x fp32's on b";
  const std::vector<v1::Job> rescheduled = manager_->Schedule({again}).value();
  ASSERT_EQ(rescheduled.size(), 1u);
  EXPECT_EQ(rescheduled[0].spec().precision(), v1::PRECISION_FP32);
  EXPECT_EQ(rescheduled[0].precision_reason(), placed.precision_reason);
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

TEST_F(JobManagerTest, APreemptedJobRequeuesWithoutARestart) {
  const std::string victim =
      manager_->Submit(Spec(/*max_restarts=*/0), "", "ada", "")->id();
  const std::string preemptor = manager_->Submit(Spec(), "", "bob", "")->id();
  ASSERT_TRUE(manager_->Schedule({{victim, OneNode("a")}}).ok());
  ASSERT_TRUE(manager_->RecordCheckpoint(victim, 1, 20, "/ck/20").ok());
  bool preempted = false;
  auto preempting = manager_->Preempt(victim, "job j-2 needs a", preemptor,
                                      "preempting j-1", &preempted);
  ASSERT_TRUE(preempting.ok()) << preempting.status();
  EXPECT_TRUE(preempted);
  EXPECT_EQ(preempting->state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_EQ(preempting->preemptions(), 1);
  // Only a scheduled or running job can be preempted, once.
  EXPECT_EQ(manager_->Preempt(victim, "again", "", "", &preempted)->state(),
            v1::JOB_STATE_PREEMPTING);
  EXPECT_FALSE(preempted);
  EXPECT_FALSE(manager_->Preempt(preemptor, "queued", "", "", &preempted)
                   .value()
                   .preemptions());
  EXPECT_TRUE(manager_->IsLiveAttemptOn(victim, 1, "a"));
  auto requeued = manager_->EndAttempt(victim, 1, AttemptOutcome::kStopped, "");
  EXPECT_EQ(requeued->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(requeued->restarts(), 0);
  EXPECT_EQ(EventKinds(victim),
            (std::vector<v1::JobEventKind>{
                v1::JOB_EVENT_KIND_SUBMITTED, v1::JOB_EVENT_KIND_SCHEDULED,
                v1::JOB_EVENT_KIND_CHECKPOINTED, v1::JOB_EVENT_KIND_PREEMPTED,
                v1::JOB_EVENT_KIND_REQUEUED}));
  EXPECT_EQ(Log(victim)[3].event().message(),
            "attempt 1 preempted: job j-2 needs a; it checkpoints at the "
            "next step boundary, stops and is requeued");
  EXPECT_EQ(Log(victim)[4].event().message(),
            "attempt 1 stopped for preemption; requeued without using a "
            "restart (0 of 0 used), resuming from step 20");
  EXPECT_EQ(EventKinds(preemptor),
            (std::vector<v1::JobEventKind>{v1::JOB_EVENT_KIND_SUBMITTED,
                                           v1::JOB_EVENT_KIND_PREEMPTING}));

  // Preempted again 30 minutes later and 61 minutes after the first: the
  // times kept are the last hour's.
  ASSERT_TRUE(manager_->Schedule({{victim, OneNode("a")}}).ok());
  now_ += absl::Minutes(30);
  ASSERT_TRUE(manager_->Preempt(victim, "second", "", "").ok());
  ASSERT_TRUE(
      manager_->EndAttempt(victim, 2, AttemptOutcome::kStopped, "").ok());
  ASSERT_TRUE(manager_->Schedule({{victim, OneNode("a")}}).ok());
  now_ += absl::Minutes(31);
  auto third = manager_->Preempt(victim, "third", "", "");
  EXPECT_EQ(third->preemptions(), 3);
  EXPECT_EQ(third->recent_preemption_times_size(), 2);
  // Finishing meanwhile succeeds; failing uses a restart like any failure.
  EXPECT_EQ(
      manager_->EndAttempt(victim, 3, AttemptOutcome::kFailed, "boom")->state(),
      v1::JOB_STATE_FAILED);
  const std::string done = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{done, OneNode("b")}}).ok());
  ASSERT_TRUE(manager_->Preempt(done, "drain", "", "").ok());
  EXPECT_EQ(
      manager_->EndAttempt(done, 1, AttemptOutcome::kSucceeded, "")->state(),
      v1::JOB_STATE_SUCCEEDED);
  // A cancel while preempting ends as a cancel.
  const std::string cancelled = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{cancelled, OneNode("c")}}).ok());
  ASSERT_TRUE(manager_->Preempt(cancelled, "drain", "", "").ok());
  EXPECT_EQ(manager_->RequestCancel(cancelled, "")->state(),
            v1::JOB_STATE_CANCELLING);
  EXPECT_EQ(
      manager_->EndAttempt(cancelled, 1, AttemptOutcome::kStopped, "")->state(),
      v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, ProgressIsSampledForTheWebPageAndKept) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  std::vector<v1::RankMemory> ranks(2);
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank].set_rank(rank);
    ranks[rank].set_device_peak_bytes(100 + rank);
    v1::MemoryUsage& usage = *ranks[rank].add_usage();
    usage.set_pool(v1::MEMORY_POOL_DEVICE);
    usage.set_component(v1::MEMORY_COMPONENT_WEIGHTS);
    usage.set_peak_bytes(40 - rank);
  }
  ASSERT_TRUE(manager_->RecordMemory(id, 1, ranks).ok());
  v1::JobProgress progress;
  progress.set_step(1);
  progress.set_loss(6.0);
  progress.set_validation_loss(6.5);
  ASSERT_TRUE(manager_->RecordProgress(id, 1, progress).ok());
  // Within a second of the last sample: none.
  now_ += absl::Milliseconds(500);
  progress.set_step(2);
  ASSERT_TRUE(manager_->RecordProgress(id, 1, progress).ok());
  now_ += absl::Milliseconds(600);
  progress.set_step(3);
  ASSERT_TRUE(manager_->RecordProgress(id, 1, progress).ok());
  // A job 2000 s old samples every 2 s.
  now_ += absl::Seconds(2000);
  progress.set_step(4);
  progress.set_validation_loss(5.5);
  ASSERT_TRUE(manager_->RecordProgress(id, 1, progress).ok());
  now_ += absl::Seconds(1);
  progress.set_step(5);
  ASSERT_TRUE(manager_->RecordProgress(id, 1, progress).ok());
  Reopen();  // the samples are in the store
  const std::vector<v1::ProgressSample> samples =
      manager_->ProgressSamples(id).value();
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].step(), 1);
  EXPECT_EQ(samples[1].step(), 3);
  EXPECT_EQ(samples[2].step(), 4);
  // The validation loss only where it was new.
  EXPECT_EQ(samples[0].validation_loss(), 6.5);
  EXPECT_FALSE(samples[1].has_validation_loss());
  EXPECT_EQ(samples[2].validation_loss(), 5.5);
  // Memory: the highest of the ranks'.
  EXPECT_EQ(samples[0].device_peak_bytes(), 101);
  EXPECT_EQ(samples[0].component_peak_bytes(v1::MEMORY_COMPONENT_WEIGHTS), 40);
  EXPECT_EQ(manager_->ProgressSamples("j-404").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, ReopenRestoresJobsLogsAndTheirOrder) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  v1::WorkerLogLine line;
  line.set_job_id(id);
  line.set_text("hello from rank 0");
  ASSERT_TRUE(manager_->AppendLogLines(id, 1, {line, line}).ok());
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
  const std::string next = manager_->Submit(Spec(), "", "ada", "")->id();
  EXPECT_GT(manager_->SubmissionOrder(next), manager_->SubmissionOrder(id));
  const JobPage page = manager_->List({}).value();
  ASSERT_FALSE(page.jobs.empty());
  EXPECT_EQ(page.jobs[0].id(), next);
}

// Records from before ids were random ("j-00000007") keep their order, and
// new jobs come after them.
TEST_F(JobManagerTest, SequentialIdsOfOlderStoresKeepTheirOrder) {
  for (const char* id : {"j-00000002", "j-00000010"}) {
    v1::Job job;
    job.set_id(id);
    job.set_owner("ada");
    job.set_state(v1::JOB_STATE_SUCCEEDED);
    WriteBatch batch;
    batch.Put(absl::StrCat("job/", id), job.SerializeAsString());
    ASSERT_TRUE(store_.Write(batch, {}).ok());
  }
  Reopen();
  const std::string next = manager_->Submit(Spec(), "", "ada", "")->id();
  const JobPage page = manager_->List({}).value();
  std::vector<std::string> listed;
  for (const v1::Job& job : page.jobs) listed.push_back(job.id());
  EXPECT_EQ(listed,
            (std::vector<std::string>{next, "j-00000010", "j-00000002"}));
}

TEST_F(JobManagerTest, ListsNewestFirstWithFiltersAndPages) {
  std::vector<std::string> ids;  // ids[i] is the i+1'th submitted
  for (int i = 0; i < 5; ++i) {
    ids.push_back(
        manager_->Submit(Spec(), "", i % 2 ? "bob" : "ada", "").value().id());
  }
  manager_->RequestCancel(ids[2], "").value();
  JobListFilter filter;
  filter.page_size = 2;
  auto page = manager_->List(filter).value();
  ASSERT_EQ(page.jobs.size(), 2u);
  EXPECT_EQ(page.jobs[0].id(), ids[4]);
  EXPECT_EQ(page.jobs[1].id(), ids[3]);
  // The token is opaque: it names neither a number nor the id as it is.
  EXPECT_FALSE(absl::StrContains(page.next_page_token, ids[3]));
  filter.page_token = page.next_page_token;
  page = manager_->List(filter).value();
  EXPECT_EQ(page.jobs[0].id(), ids[2]);
  filter = JobListFilter();
  filter.owner = "ada";
  filter.states = {v1::JOB_STATE_QUEUED};
  page = manager_->List(filter).value();
  ASSERT_EQ(page.jobs.size(), 2u);  // the 5th and the 1st (the 3rd ended)
  EXPECT_EQ(page.jobs[0].id(), ids[4]);
  EXPECT_EQ(page.jobs[1].id(), ids[0]);
  EXPECT_TRUE(page.next_page_token.empty());
  for (const char* garbage : {"garbage", "j-00000003", "YWZ0ZXI6"}) {
    filter.page_token = garbage;
    EXPECT_EQ(manager_->List(filter).status().code(),
              absl::StatusCode::kInvalidArgument)
        << garbage;
  }
  // A token made of bob's job continues none of ada's lists: it reads as a
  // token of a deleted job.
  std::string bobs_token;
  absl::WebSafeBase64Escape(absl::StrCat("after:", ids[3]), &bobs_token);
  filter.page_token = bobs_token;
  const absl::Status forged = manager_->List(filter).status();
  EXPECT_TRUE(absl::IsInvalidArgument(forged)) << forged;
  EXPECT_TRUE(absl::StrContains(forged.message(), "no longer valid")) << forged;
}

TEST_F(JobManagerTest, PagesAreBoundedByBytesAndListSummaries) {
  // Ten jobs of 60 KB of YAML each (a spec's comments count).
  const std::string yaml(60'000, '#');
  std::vector<std::string> submitted;
  for (int i = 0; i < 10; ++i) {
    submitted.push_back(manager_->Submit(Spec(), yaml, "ada", "").value().id());
  }
  JobListFilter filter;
  filter.max_page_bytes = 200'000;
  std::vector<std::string> listed;
  while (true) {
    const JobPage page = manager_->List(filter).value();
    int64_t bytes = 0;
    for (const v1::Job& job : page.jobs) {
      bytes += job.ByteSizeLong();
      listed.push_back(job.id());
    }
    EXPECT_EQ(page.jobs.size(), page.next_page_token.empty() ? 1u : 3u);
    EXPECT_LE(bytes, filter.max_page_bytes);
    if (page.next_page_token.empty()) break;
    filter.page_token = page.next_page_token;
  }
  EXPECT_EQ(listed.size(), 10u);
  EXPECT_EQ(listed.front(), submitted.back());
  EXPECT_EQ(listed.back(), submitted.front());
  // A row larger than the bound still comes, alone.
  filter = JobListFilter();
  filter.max_page_bytes = 1000;
  EXPECT_EQ(manager_->List(filter)->jobs.size(), 1u);
  // Summaries: every job in one small page, without the YAML.
  filter.summaries = true;
  filter.max_page_bytes = 4000;
  const JobPage summaries = manager_->List(filter).value();
  ASSERT_EQ(summaries.jobs.size(), 10u);
  EXPECT_TRUE(summaries.next_page_token.empty());
  EXPECT_EQ(summaries.jobs[0].spec_yaml(), "");
  EXPECT_EQ(summaries.jobs[0].spec().name(), Spec().name());
}

TEST_F(JobManagerTest, TheQueueAndVersionsTrackChanges) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  const int64_t version = manager_->Version(id);
  manager_->SetQueue({{id, {"behind job j-00000007", 2}}});
  EXPECT_GT(manager_->Version(id), version);
  EXPECT_EQ(manager_->Get(id)->wait_reason(), "behind job j-00000007");
  EXPECT_EQ(manager_->Get(id)->queue_position(), 2);
  EXPECT_EQ(manager_->WaitForChange(id, manager_->Version(id),
                                    absl::Milliseconds(10)),
            manager_->Version(id));
  // The position alone moving is a change too; left out, both clear.
  const int64_t before_move = manager_->Version(id);
  manager_->SetQueue({{id, {"behind job j-00000007", 1}}});
  EXPECT_GT(manager_->Version(id), before_move);
  manager_->SetQueue({});
  EXPECT_EQ(manager_->Get(id)->wait_reason(), "");
  EXPECT_EQ(manager_->Get(id)->queue_position(), 0);
}

TEST_F(JobManagerTest, SubmitTellsWhetherItCreatedTheJob) {
  bool created = false;
  auto first = manager_->Submit(Spec(), "", "ada", "key-1", &created);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(created);
  auto replay = manager_->Submit(Spec(), "", "ada", "key-1", &created);
  ASSERT_TRUE(replay.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(replay->id(), first->id());
  manager_->Submit(Spec(), "", "ada", "", &created).value();
  EXPECT_TRUE(created);
}

TEST_F(JobManagerTest, EndAttemptTellsWhetherItEndedTheAttempt) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  bool ended = false;
  ASSERT_TRUE(
      manager_->EndAttempt(id, 1, AttemptOutcome::kFailed, "x", &ended).ok());
  EXPECT_TRUE(ended);
  // The same attempt again (a second lost node, a late report): a no-op.
  auto again =
      manager_->EndAttempt(id, 1, AttemptOutcome::kFailed, "y", &ended);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(ended);
  EXPECT_EQ(again->restarts(), 1);
  EXPECT_EQ(again->last_error(), "x");
}

TEST_F(JobManagerTest, AnAttemptThatNeverStartedIsRequeuedWithoutARestart) {
  const std::string id =
      manager_->Submit(Spec(/*max_restarts=*/0), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  auto requeued = manager_->EndAttempt(id, 1, AttemptOutcome::kNotStarted,
                                       "could not send the start command");
  ASSERT_TRUE(requeued.ok());
  EXPECT_EQ(requeued->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(requeued->restarts(), 0);
  EXPECT_TRUE(requeued->allocation().nodes().empty());
  // The next attempt fails for real: no restarts left, so the job fails.
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("b")}}).ok());
  EXPECT_EQ(
      manager_->EndAttempt(id, 2, AttemptOutcome::kFailed, "boom")->state(),
      v1::JOB_STATE_FAILED);
  // Cancelling: never started means cancelled.
  const std::string cancelled = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{cancelled, OneNode("a")}}).ok());
  ASSERT_TRUE(manager_->RequestCancel(cancelled, "").ok());
  EXPECT_EQ(manager_->EndAttempt(cancelled, 1, AttemptOutcome::kNotStarted, "")
                ->state(),
            v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, AttemptAndQueueTimesArePersisted) {
  const absl::Time submitted = now_;
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  now_ += absl::Minutes(3);
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  now_ += absl::Minutes(4);
  auto requeued = manager_->EndAttempt(id, 1, AttemptOutcome::kFailed, "x");
  ASSERT_TRUE(requeued.ok());
  EXPECT_EQ(requeued->queue_time().seconds(), absl::ToUnixSeconds(now_));
  now_ += absl::Minutes(5);
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("b")}}).ok());
  Reopen();
  const v1::Job job = manager_->Get(id).value();
  EXPECT_EQ(job.start_time().seconds(),
            absl::ToUnixSeconds(submitted + absl::Minutes(3)));
  EXPECT_EQ(job.attempt_start_time().seconds(), absl::ToUnixSeconds(now_));
  EXPECT_EQ(job.queue_time().seconds(),
            absl::ToUnixSeconds(now_ - absl::Minutes(5)));
}

TEST_F(JobManagerTest, FinishedNodesArePersistedForTheLiveAttemptOnly) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  ASSERT_TRUE(manager_->RecordNodeFinished(id, 1, "a").ok());
  ASSERT_TRUE(manager_->RecordNodeFinished(id, 1, "a").ok());  // once only
  EXPECT_TRUE(manager_->RecordNodeFinished(id, 7, "b").ok());  // stale
  Reopen();
  const v1::Job job = manager_->Get(id).value();
  EXPECT_EQ(std::vector<std::string>(job.finished_nodes().begin(),
                                     job.finished_nodes().end()),
            std::vector<std::string>{"a"});
  auto requeued = manager_->EndAttempt(id, 1, AttemptOutcome::kFailed, "x");
  EXPECT_TRUE(requeued->finished_nodes().empty());
}

TEST_F(JobManagerTest, IsLiveAttemptOnNamesTheNodesOfTheLiveAttempt) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  EXPECT_FALSE(manager_->IsLiveAttemptOn(id, 0, "a"));
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  EXPECT_TRUE(manager_->IsLiveAttemptOn(id, 1, "a"));
  EXPECT_FALSE(manager_->IsLiveAttemptOn(id, 1, "b"));
  EXPECT_FALSE(manager_->IsLiveAttemptOn(id, 2, "a"));
  EXPECT_FALSE(manager_->IsLiveAttemptOn("j-99999999", 1, "a"));
  ASSERT_TRUE(manager_->EndAttempt(id, 1, AttemptOutcome::kSucceeded, "").ok());
  EXPECT_FALSE(manager_->IsLiveAttemptOn(id, 1, "a"));
}

TEST_F(JobManagerTest, LogLinesOfStaleAttemptsAndEndedJobsAreDropped) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  // Queued: no attempt is live yet.
  ASSERT_TRUE(manager_->AppendLogLines(id, 0, {Line(id, 0, "early")}).ok());
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  ASSERT_TRUE(manager_->AppendLogLines(id, 1, {Line(id, 1, "kept")}).ok());
  ASSERT_TRUE(manager_->AppendLogLines(id, 2, {Line(id, 2, "future")}).ok());
  ASSERT_TRUE(manager_->EndAttempt(id, 1, AttemptOutcome::kFailed, "x").ok());
  ASSERT_TRUE(manager_->AppendLogLines(id, 1, {Line(id, 1, "late")}).ok());
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  ASSERT_TRUE(manager_->EndAttempt(id, 2, AttemptOutcome::kSucceeded, "").ok());
  ASSERT_TRUE(manager_->AppendLogLines(id, 2, {Line(id, 2, "after")}).ok());
  std::vector<std::string> lines;
  for (const v1::LogEntry& entry : Log(id)) {
    if (entry.has_line()) lines.push_back(entry.line().text());
  }
  EXPECT_EQ(lines, std::vector<std::string>{"kept"});
  EXPECT_EQ(manager_->Get(id)->log_lines(), 1);
}

TEST_F(JobManagerTest, LogLinesBeyondTheCapAreDroppedWithOneNote) {
  Reopen(LogLinesPerJob(5));
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  for (int batch = 0; batch < 3; ++batch) {
    std::vector<v1::WorkerLogLine> lines;
    for (int i = 0; i < 3; ++i) {
      lines.push_back(Line(id, 1, absl::StrCat("line ", 3 * batch + i)));
    }
    ASSERT_TRUE(manager_->AppendLogLines(id, 1, lines).ok());
  }
  std::vector<std::string> texts;
  for (const v1::LogEntry& entry : Log(id)) {
    if (entry.has_line()) texts.push_back(entry.line().text());
  }
  ASSERT_EQ(texts.size(), 6u);  // five lines, then the note
  EXPECT_EQ(texts[4], "line 4");
  EXPECT_NE(texts[5].find("cap of 5"), std::string::npos) << texts[5];
  const v1::Job job = manager_->Get(id).value();
  EXPECT_EQ(job.log_lines(), 5);
  EXPECT_TRUE(job.log_truncated());
  // Events still go in after the cap, and a restart keeps the counters.
  ASSERT_TRUE(manager_->EndAttempt(id, 1, AttemptOutcome::kSucceeded, "").ok());
  Reopen(LogLinesPerJob(5));
  EXPECT_EQ(Log(id).back().event().kind(), v1::JOB_EVENT_KIND_SUCCEEDED);
  EXPECT_TRUE(manager_->Get(id)->log_truncated());
}

TEST_F(JobManagerTest, LogLinesDoNotRewriteTheRecordButSurviveARestart) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  const std::string record = store_.Get("job/" + id).value().value();
  manager_->TakeChangedJobIds();
  ASSERT_TRUE(manager_->AppendLogLines(id, 1, {Line(id, 1, "a")}).ok());
  ASSERT_TRUE(manager_->AppendLogLines(id, 1, {Line(id, 1, "b")}).ok());
  EXPECT_EQ(store_.Get("job/" + id).value().value(), record);
  EXPECT_TRUE(manager_->TakeChangedJobIds().empty());  // not a record change
  const int64_t sequence = manager_->Get(id)->last_log_sequence();
  Reopen();
  EXPECT_EQ(manager_->Get(id)->last_log_sequence(), sequence);
  EXPECT_EQ(manager_->Get(id)->log_lines(), 2);
  // The next event follows the lines, not the record's older sequence.
  ASSERT_TRUE(manager_->MarkRunning(id, 1).ok());
  EXPECT_EQ(Log(id).back().sequence(), sequence + 1);
}

TEST_F(JobManagerTest, ReadLogStartsAfterTheGivenSequence) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  std::vector<v1::WorkerLogLine> lines;
  for (int i = 0; i < 20; ++i) lines.push_back(Line(id, 1, absl::StrCat(i)));
  ASSERT_TRUE(manager_->AppendLogLines(id, 1, lines).ok());
  const std::vector<v1::LogEntry> tail = Log(id, 19);
  ASSERT_EQ(tail.size(), 3u);  // sequences 20, 21, 22
  EXPECT_EQ(tail.front().sequence(), 20);
  EXPECT_EQ(tail.back().line().text(), "19");
  EXPECT_EQ(Log(id, 22).size(), 0u);
}

TEST_F(JobManagerTest, ChangedJobIdsComeOnceEach) {
  const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
  manager_->TakeChangedJobIds();
  v1::JobProgress progress;
  for (int step = 1; step <= 50; ++step) {
    progress.set_step(step);
    ASSERT_TRUE(manager_->RecordProgress(id, 1, progress).ok());
  }
  EXPECT_EQ(manager_->TakeChangedJobIds(), std::vector<std::string>{id});
  EXPECT_TRUE(manager_->TakeChangedJobIds().empty());
  // In submission order, whatever the random ids' order.
  std::vector<std::string> submitted;
  for (int i = 0; i < 20; ++i) {
    submitted.push_back(manager_->Submit(Spec(), "", "ada", "")->id());
  }
  EXPECT_EQ(manager_->TakeChangedJobIds(), submitted);
}

}  // namespace
}  // namespace plateau::daemon

namespace plateau::daemon {
namespace {

TEST_F(JobManagerTest, AUserHasAtMostMaxActiveJobs) {
  JobLimits limits;
  limits.max_active_jobs_per_user = 2;
  Reopen(limits);
  const std::string first = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Submit(Spec(), "", "ada", "").ok());
  const absl::StatusOr<v1::Job> refused =
      manager_->Submit(Spec(), "", "ada", "");
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "ada has 2 jobs that have not ended"))
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "--max_active_jobs_per_user"));
  EXPECT_TRUE(manager_->Submit(Spec(), "", "bob", "").ok());
  // Counted from the records after a restart too.
  Reopen(limits);
  EXPECT_TRUE(absl::IsResourceExhausted(
      manager_->Submit(Spec(), "", "ada", "").status()));
  // An ended job no longer counts.
  ASSERT_TRUE(manager_->RequestCancel(first, "").ok());
  EXPECT_TRUE(manager_->Submit(Spec(), "", "ada", "").ok());
}

TEST_F(JobManagerTest, EndedJobsArePrunedBeyondTheCountAndAfterTheTime) {
  JobLimits limits;
  limits.keep_ended_jobs_per_user = 2;
  limits.keep_ended_for = absl::Hours(1);
  Reopen(limits);
  std::vector<std::string> ended;
  for (int i = 0; i < 4; ++i) {
    const std::string id =
        manager_->Submit(Spec(), "", "ada", absl::StrCat("key-", i))->id();
    ASSERT_TRUE(manager_->RequestCancel(id, "").ok());
    ended.push_back(id);
    now_ += absl::Minutes(1);
  }
  const std::string running = manager_->Submit(Spec(), "", "ada", "")->id();
  ASSERT_TRUE(manager_->Submit(Spec(), "", "bob", "").ok());

  // The two oldest ended jobs go: record, log and all.
  EXPECT_EQ(manager_->PruneEndedJobs(100).value(), 2);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(manager_->Get(ended[i]).ok(), i >= 2) << i;
    if (i >= 2) {
      EXPECT_FALSE(Log(ended[i]).empty()) << i;
    }
  }
  int keys_of_pruned = 0;
  for (const char* prefix : {"job/", "log/", "logstate/", "sample/"}) {
    ASSERT_TRUE(store_
                    .Scan(prefix,
                          [&](absl::string_view key, absl::string_view) {
                            keys_of_pruned +=
                                absl::StrContains(key, ended[0]) ||
                                absl::StrContains(key, ended[1]);
                            return true;
                          })
                    .ok());
  }
  EXPECT_EQ(keys_of_pruned, 0);
  EXPECT_EQ(manager_->PruneEndedJobs(100).value(), 0);
  // A pruned job's idempotency key starts a new job.
  const absl::StatusOr<v1::Job> again =
      manager_->Submit(Spec(), "", "ada", "key-0");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->id(), ended[0]);

  // An hour on, the others have expired; jobs that have not ended stay.
  now_ += absl::Hours(1);
  EXPECT_EQ(manager_->PruneEndedJobs(100).value(), 2);
  EXPECT_TRUE(manager_->Get(running).ok());
  Reopen(limits);
  for (const std::string& id : ended) EXPECT_FALSE(manager_->Get(id).ok());
  EXPECT_TRUE(manager_->Get(running).ok());
}

// A batch of deletes stays bounded: jobs with long logs go one a call.
TEST_F(JobManagerTest, PruningTakesLongLogsAJobAtATime) {
  JobLimits limits;
  limits.keep_ended_jobs_per_user = 1;
  Reopen(limits);
  for (int i = 0; i < 3; ++i) {
    const std::string id = manager_->Submit(Spec(), "", "ada", "")->id();
    ASSERT_TRUE(manager_->Schedule({{id, OneNode("a")}}).ok());
    std::vector<v1::WorkerLogLine> lines(1000, Line(id, 1, "line"));
    for (int batch = 0; batch < 60; ++batch) {
      ASSERT_TRUE(manager_->AppendLogLines(id, 1, lines).ok());
    }
    ASSERT_TRUE(
        manager_->EndAttempt(id, 1, AttemptOutcome::kSucceeded, "").ok());
    now_ += absl::Minutes(1);
  }
  EXPECT_EQ(manager_->PruneEndedJobs(100).value(), 1);
  EXPECT_EQ(manager_->PruneEndedJobs(100).value(), 1);
  EXPECT_EQ(manager_->PruneEndedJobs(100).value(), 0);
}

}  // namespace
}  // namespace plateau::daemon
