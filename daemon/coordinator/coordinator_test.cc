// The coordinator over in-memory state with fake node connections and a fake
// clock: restarts are a fresh JobManager, NodeRegistry and Coordinator over
// the same store.
#include "daemon/coordinator/coordinator.h"

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job_spec.h"

namespace plateau::daemon {
namespace {

class FakeConnection : public NodeConnection {
 public:
  bool Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock lock(&mutex_);
    if (closed_ || (accepted_sends_ >= 0 &&
                    static_cast<int>(sent_.size()) >= accepted_sends_)) {
      return false;
    }
    sent_.push_back(message);
    return true;
  }
  void Close() override {
    absl::MutexLock lock(&mutex_);
    closed_ = true;
  }
  std::vector<v1::AttemptRef> TakeUnsentStarts() override {
    absl::MutexLock lock(&mutex_);
    return std::exchange(unsent_starts_, {});
  }

  // Sends beyond the first `count` fail; -1: none do.
  void FailSendsAfter(int count) {
    absl::MutexLock lock(&mutex_);
    accepted_sends_ = count;
  }
  void SetUnsentStarts(std::vector<v1::AttemptRef> starts) {
    absl::MutexLock lock(&mutex_);
    unsent_starts_ = std::move(starts);
  }
  bool closed() {
    absl::MutexLock lock(&mutex_);
    return closed_;
  }
  std::vector<v1::StartAttempt> starts() {
    absl::MutexLock lock(&mutex_);
    std::vector<v1::StartAttempt> starts;
    for (const auto& message : sent_) {
      if (message.has_start()) starts.push_back(message.start());
    }
    return starts;
  }
  std::vector<v1::StopAttempt> stops() {
    absl::MutexLock lock(&mutex_);
    std::vector<v1::StopAttempt> stops;
    for (const auto& message : sent_) {
      if (message.has_stop()) stops.push_back(message.stop());
    }
    return stops;
  }

 private:
  absl::Mutex mutex_;
  std::vector<v1::CoordinatorMessage> sent_ ABSL_GUARDED_BY(mutex_);
  std::vector<v1::AttemptRef> unsent_starts_ ABSL_GUARDED_BY(mutex_);
  int accepted_sends_ ABSL_GUARDED_BY(mutex_) = -1;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
};

v1::AttemptRef Ref(const std::string& job_id, int32_t attempt) {
  v1::AttemptRef ref;
  ref.set_job_id(job_id);
  ref.set_attempt(attempt);
  return ref;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() {
    options_.stop_grace_period = absl::Seconds(30);
    options_.stop_margin = absl::Seconds(10);
    Open();
  }

  // plateaud (re)starting over the same store. Start() is left to the test.
  void Open() {
    coordinator_.reset();
    nodes_.reset();
    jobs_.reset();
    metrics_ = std::make_unique<DaemonMetrics>();
    const Clock clock = [this] {
      absl::MutexLock lock(&clock_mutex_);
      return now_;
    };
    jobs_ = JobManager::Open(&store_, clock).value();
    nodes_ = NodeRegistry::Open(&store_, clock, kNodeTimeout).value();
    rendezvous_ = std::make_unique<RendezvousStore>();
    coordinator_ = std::make_unique<Coordinator>(
        jobs_.get(), nodes_.get(), rendezvous_.get(), metrics_.get(), &store_,
        clock, options_);
  }

  void Advance(absl::Duration duration) {
    absl::MutexLock lock(&clock_mutex_);
    now_ += duration;
  }

  // A node of `devices` 2 GiB devices, as an agent announces them.
  std::shared_ptr<FakeConnection> Attach(
      const std::string& name, int devices,
      const std::vector<v1::AttemptRef>& running = {}) {
    v1::WorkerHello hello;
    hello.set_node_name(name);
    for (int i = 0; i < devices; ++i) {
      v1::Device* device = hello.add_devices();
      device->set_index(i);
      device->set_memory_bytes(int64_t{2} << 30);
    }
    for (const v1::AttemptRef& attempt : running) {
      *hello.add_running_attempts() = attempt;
    }
    auto connection = std::make_shared<FakeConnection>();
    EXPECT_TRUE(coordinator_->OnAttach(hello, connection).ok());
    return connection;
  }

  // A node whose `devices` CPU devices each have `memory_bytes`, and bf16
  // products `bf16_speedup` times as fast as fp32's (0: not measured).
  std::shared_ptr<FakeConnection> AttachWithMemory(const std::string& name,
                                                   int devices,
                                                   int64_t memory_bytes,
                                                   double bf16_speedup = 0) {
    v1::WorkerHello hello;
    hello.set_node_name(name);
    for (int i = 0; i < devices; ++i) {
      v1::Device* device = hello.add_devices();
      device->set_index(i);
      device->set_kind(v1::DEVICE_KIND_CPU);
      device->set_memory_bytes(memory_bytes);
      device->set_bf16_product_speedup(bf16_speedup);
    }
    auto connection = std::make_shared<FakeConnection>();
    EXPECT_TRUE(coordinator_->OnAttach(hello, connection).ok());
    return connection;
  }

  // A small valid MoE spec on 1 node x 2 devices; `schedules` is the YAML
  // value of its schedules section, `vocab` its vocabulary.
  absl::StatusOr<v1::Job> SubmitSpec(const std::string& schedules,
                                     int vocab = 320,
                                     const std::string& idempotency_key = "") {
    const std::string yaml = absl::StrCat(
        "name: planned\n"
        "resources: {nodes: 1, devices_per_node: 2}\n"
        "model: {layers: 2, d_model: 64, heads: 4, experts: 4, top_k: 2,\n"
        "        ffn_hidden: 128, vocab: ",
        vocab,
        ", seq_len: 64}\n"
        "parallel: {ep: 2, pp: 1, dp: 1}\n"
        "schedules: ",
        schedules,
        "\n"
        "optimizer: {kind: adamw}\n"
        "data: {path: data/x, batch_tokens: 1024}\n"
        "train: {steps: 10}\n");
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
    if (!spec.ok()) return spec.status();
    return coordinator_->Submit(*spec, yaml, "ada", idempotency_key);
  }

  std::string Submit(int nodes, int devices_per_node, int max_restarts = 0,
                     absl::Duration time_limit = absl::ZeroDuration(),
                     int priority = 0, const std::string& owner = "ada") {
    // A valid spec: admission plans it (ep over every device).
    absl::StatusOr<v1::JobSpec> parsed = ParseJobSpecYaml(absl::StrCat(
        "name: test\n"
        "model: {layers: 1, d_model: 32, heads: 2, experts: 8, top_k: 1,\n"
        "        ffn_hidden: 32, vocab: 64, seq_len: 16}\n"
        "parallel: {ep: ",
        nodes * devices_per_node,
        ", pp: 1, dp: 1}\n"
        "data: {path: data/x, batch_tokens: 128}\n"
        "train: {steps: 100}\n"
        "resources: {nodes: ",
        nodes, ", devices_per_node: ", devices_per_node, "}\n"));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    v1::JobSpec spec = *std::move(parsed);
    spec.mutable_train()->set_max_restarts(max_restarts);
    spec.set_priority(priority);
    if (time_limit > absl::ZeroDuration()) {
      spec.mutable_train()->mutable_time_limit()->set_seconds(
          absl::ToInt64Seconds(time_limit));
    }
    return coordinator_->Submit(spec, "", owner, "").value().id();
  }

  v1::Job Job(const std::string& id) { return jobs_->Get(id).value(); }

  void Report(const std::string& node, const v1::AttemptRef& attempt,
              v1::AttemptPhase phase) {
    v1::WorkerMessage message;
    *message.mutable_attempt_status()->mutable_attempt() = attempt;
    message.mutable_attempt_status()->set_phase(phase);
    coordinator_->OnWorkerMessage(node, message);
  }

  // Rank 0's progress, with a checkpoint at `checkpoint_step`.
  void ReportCheckpoint(const std::string& node, const v1::AttemptRef& attempt,
                        int64_t checkpoint_step) {
    v1::WorkerMessage message;
    *message.mutable_progress()->mutable_attempt() = attempt;
    v1::JobProgress& progress = *message.mutable_progress()->mutable_progress();
    progress.set_step(checkpoint_step);
    progress.set_checkpoint_step(checkpoint_step);
    progress.set_checkpoint_location(absl::StrCat(
        "runs/", attempt.job_id(), "/checkpoints/step-", checkpoint_step));
    coordinator_->OnWorkerMessage(node, message);
  }

  // The messages of the job's events of `kind`, oldest first.
  std::vector<std::string> Events(const std::string& id,
                                  v1::JobEventKind kind) {
    std::vector<std::string> messages;
    EXPECT_TRUE(jobs_
                    ->ReadLog(id, 0,
                              [&](const v1::LogEntry& entry) {
                                if (entry.has_event() &&
                                    entry.event().kind() == kind) {
                                  messages.push_back(entry.event().message());
                                }
                                return true;
                              })
                    .ok());
    return messages;
  }

  void Heartbeat(const std::string& node) {
    v1::WorkerMessage message;
    message.mutable_heartbeat()->set_sequence(1);
    coordinator_->OnWorkerMessage(node, message);
  }

  double Counter(const std::string& name) {
    for (const auto& family : metrics_->registry()->Collect()) {
      if (family.name == name && !family.metric.empty()) {
        return family.metric[0].counter.value;
      }
    }
    return -1;
  }

  static constexpr absl::Duration kNodeTimeout = absl::Seconds(10);
  MemoryStore store_;
  absl::Mutex clock_mutex_;
  absl::Time now_ ABSL_GUARDED_BY(clock_mutex_) =
      absl::FromUnixSeconds(1'800'000'000);
  CoordinatorOptions options_;
  std::unique_ptr<DaemonMetrics> metrics_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<NodeRegistry> nodes_;
  std::unique_ptr<RendezvousStore> rendezvous_;
  std::unique_ptr<Coordinator> coordinator_;
};

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST_F(CoordinatorTest, AdmissionPlansForTheLargestDevicesAndPlacesOnThem) {
  auto small = AttachWithMemory("a-small", 2, 4 * kMiB);
  auto big = AttachWithMemory("b-big", 2, kGiB);
  absl::StatusOr<v1::Job> job = SubmitSpec("{ring_dtp: true}");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->has_plan());
  EXPECT_EQ(job->plan().device_memory_bytes(), kGiB);
  EXPECT_TRUE(job->plan().fits());
  EXPECT_GT(job->plan().planned().device_peak_bytes(), 4 * kMiB);
  // Best fit would take a-small (tied, first by name); its devices are too
  // small for the plan.
  coordinator_->RunPass();
  EXPECT_TRUE(small->starts().empty());
  ASSERT_EQ(big->starts().size(), 1u);
  EXPECT_EQ(big->starts()[0].spec().name(), "planned");
  // Another job waits for b-big rather than run out of memory on a-small.
  absl::StatusOr<v1::Job> second = SubmitSpec("{ring_dtp: true}");
  ASSERT_TRUE(second.ok()) << second.status();
  coordinator_->RunPass();
  EXPECT_TRUE(small->starts().empty());
  EXPECT_EQ(Job(second->id()).state(), v1::JOB_STATE_QUEUED);
}

// precision: auto (the spec leaves it out) is chosen at the first attempt,
// for the devices it gets: fp32 where their bf16 products are not faster
// (it fits in fp32), bf16 where they are; the start and the job carry the
// choice and why, and the job keeps it.
TEST_F(CoordinatorTest, AutoPrecisionIsChosenForTheFirstAttemptsDevices) {
  auto slow = AttachWithMemory("slow", 2, kGiB, 0.9);
  absl::StatusOr<v1::Job> first = SubmitSpec("{ring_dtp: true}");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->has_fp32_alternative());
  coordinator_->RunPass();
  ASSERT_EQ(slow->starts().size(), 1u);
  const v1::StartAttempt on_slow = slow->starts()[0];
  EXPECT_EQ(on_slow.spec().precision(), v1::PRECISION_FP32);
  EXPECT_THAT(on_slow.precision_reason(),
              ::testing::HasSubstr("auto: bf16 products 0.90x fp32's on slow"));
  const v1::Job chosen = Job(first->id());
  EXPECT_EQ(chosen.precision_reason(), on_slow.precision_reason());
  EXPECT_EQ(chosen.plan().precision(), "fp32");
  EXPECT_FALSE(chosen.has_fp32_alternative());

  auto fast = AttachWithMemory("fast", 2, kGiB, 3.4);
  absl::StatusOr<v1::Job> second = SubmitSpec("{ring_dtp: true}");
  ASSERT_TRUE(second.ok()) << second.status();
  coordinator_->RunPass();
  ASSERT_EQ(fast->starts().size(), 1u);
  EXPECT_EQ(fast->starts()[0].spec().precision(), v1::PRECISION_BF16);
  EXPECT_EQ(fast->starts()[0].precision_reason(),
            "auto: bf16 products 3.40x fp32's on fast");
  EXPECT_EQ(Job(second->id()).plan().precision(), "bf16");
}

TEST_F(CoordinatorTest, AdmissionRejectsAJobThatCannotFitAndKeepsNoRecord) {
  AttachWithMemory("a", 2, 64 * kMiB);
  absl::StatusOr<v1::Job> job = SubmitSpec("{}", /*vocab=*/2'000'000);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(job.status())) << job.status();
  EXPECT_THAT(std::string(job.status().message()),
              ::testing::StartsWith("job does not fit its devices: "));
  EXPECT_TRUE(jobs_->JobsIn({v1::JOB_STATE_QUEUED}).empty());
  EXPECT_EQ(Counter("plateau_jobs_submitted_total"), 0);
}

TEST_F(CoordinatorTest, AReplayedSubmissionGetsItsJobWithoutAdmission) {
  AttachWithMemory("a", 2, 64 * kMiB);
  absl::StatusOr<v1::Job> job = SubmitSpec("{}", 320, "key-1");
  ASSERT_TRUE(job.ok()) << job.status();
  // The key names the submission: its replay gets the job back before
  // anything is planned (here, a spec that would no longer be admitted).
  absl::StatusOr<v1::Job> again = SubmitSpec("{}", 2'000'000, "key-1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), job->id());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      SubmitSpec("{}", 2'000'000, "key-2").status()));
}

TEST_F(CoordinatorTest, AdmissionOfAutoSchedulesNeedsANode) {
  absl::StatusOr<v1::Job> job = SubmitSpec("auto");
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(job.status())) << job.status();
  EXPECT_THAT(std::string(job.status().message()),
              ::testing::HasSubstr("attach a worker first"));
  // Pinned schedules are accepted without a plan, as before.
  job = SubmitSpec("{sco: true}");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->has_plan());

  auto a = AttachWithMemory("a", 2, kGiB);
  job = SubmitSpec("auto");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->has_plan());
  EXPECT_TRUE(job->plan().schedules_chosen());
  EXPECT_TRUE(job->spec().schedules().auto_());
  EXPECT_TRUE(job->spec().schedules().has_ring_dtp());
  EXPECT_THAT(job->spec_yaml(), ::testing::HasSubstr("auto: true"));
  // The planned spec is what the worker gets.
  coordinator_->RunPass();
  ASSERT_FALSE(a->starts().empty());
  EXPECT_TRUE(a->starts().back().spec().schedules().has_sco());
}

TEST_F(CoordinatorTest, AStartThatCannotBeSentRequeuesWithoutARestart) {
  auto a = Attach("a", 1);
  a->FailSendsAfter(1);  // the accept goes out; nothing after it does
  const std::string id = Submit(1, 1, /*max_restarts=*/0);
  coordinator_->RunPass();
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_TRUE(absl::StrContains(job.last_error(), "could not send"))
      << job.last_error();
  EXPECT_TRUE(a->closed());
  // Node a is no longer offered work; b is.
  auto b = Attach("b", 1);
  coordinator_->RunPass();
  ASSERT_EQ(b->starts().size(), 1u);
  EXPECT_EQ(b->starts()[0].attempt().attempt(), 2);
  EXPECT_EQ(Counter("plateau_job_restarts_total"), 0);
}

TEST_F(CoordinatorTest, AStartLeftUnsentWhenTheStreamBrokeRequeues) {
  auto a = Attach("a", 1);
  const std::string id = Submit(1, 1, /*max_restarts=*/0);
  coordinator_->RunPass();
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_SCHEDULED);
  a->SetUnsentStarts({Ref(id, 1)});
  coordinator_->OnDetach("a", a.get());
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.restarts(), 0);
}

TEST_F(CoordinatorTest, AFailedAttachLeavesNoSchedulableNode) {
  v1::WorkerHello hello;
  hello.set_node_name("a");
  hello.add_devices()->set_index(0);
  auto dead = std::make_shared<FakeConnection>();
  dead->FailSendsAfter(0);
  EXPECT_FALSE(coordinator_->OnAttach(hello, dead).ok());
  const std::string id = Submit(1, 1);
  coordinator_->RunPass();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Job(id).attempt(), 0);
}

TEST_F(CoordinatorTest, ALostNodeRecordedBeforeARestartEndsItsAttempts) {
  auto a = Attach("a", 1);
  const std::string id = Submit(1, 1, /*max_restarts=*/1);
  coordinator_->RunPass();
  ASSERT_TRUE(jobs_->MarkRunning(id, 1).ok());
  // plateaud persists node a LOST, then dies before ending the attempt.
  Advance(kNodeTimeout + absl::Seconds(1));
  ASSERT_EQ(nodes_->ExpireSilentNodes().value(), std::vector<std::string>{"a"});
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  Open();
  coordinator_->RunPass();
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_TRUE(absl::StrContains(job.last_error(), "node a lost"))
      << job.last_error();
}

TEST_F(CoordinatorTest, AnAttemptEndsOnceWhenTwoOfItsNodesAreLost) {
  Attach("a", 1);
  Attach("b", 1);
  const std::string id = Submit(2, 1, /*max_restarts=*/3);
  coordinator_->RunPass();
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_SCHEDULED);
  Advance(kNodeTimeout + absl::Seconds(1));
  coordinator_->RunPass();
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(Counter("plateau_job_restarts_total"), 1);
}

TEST_F(CoordinatorTest, WaitReasonsSeeTheDevicesThisPassTook) {
  Attach("a", 2);
  const std::string first = Submit(1, 2);
  const std::string second = Submit(1, 2);
  coordinator_->RunPass();
  EXPECT_EQ(Job(first).state(), v1::JOB_STATE_SCHEDULED);
  const v1::Job waiting = Job(second);
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_QUEUED);
  EXPECT_TRUE(absl::StrContains(waiting.wait_reason(), "waiting for 2"))
      << "'" << waiting.wait_reason() << "'";
}

TEST_F(CoordinatorTest, AttemptsStillScheduledAtARestartStartOver) {
  Attach("a", 2);
  const std::string scheduled = Submit(1, 1, /*max_restarts=*/0);
  const std::string running = Submit(1, 1, /*max_restarts=*/0);
  coordinator_->RunPass();
  ASSERT_TRUE(jobs_->MarkRunning(running, 1).ok());
  Open();
  coordinator_->Start();
  const v1::Job requeued = Job(scheduled);
  EXPECT_EQ(requeued.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(requeued.restarts(), 0);
  EXPECT_EQ(Job(running).state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(rendezvous_->Set(RendezvousKey(running, 1), "k", "v").ok());
  EXPECT_FALSE(rendezvous_->Set(RendezvousKey(scheduled, 1), "k", "v").ok());
}

TEST_F(CoordinatorTest, ExpectedEndsCountFromTheCurrentAttemptAfterARestart) {
  auto a = Attach("a", 1);
  const std::string limited =
      Submit(1, 1, /*max_restarts=*/1, /*time_limit=*/absl::Minutes(10));
  coordinator_->RunPass();
  Report("a", Ref(limited, 1), v1::ATTEMPT_PHASE_FAILED);
  Advance(absl::Minutes(2));
  Heartbeat("a");
  coordinator_->RunPass();  // attempt 2 starts at +2m
  ASSERT_EQ(Job(limited).attempt(), 2);
  Report("a", Ref(limited, 2), v1::ATTEMPT_PHASE_RUNNING);
  Advance(absl::Minutes(3));
  Open();  // at +5m
  coordinator_->Start();
  Attach("a", 1, {Ref(limited, 2)});
  const std::string waiting = Submit(1, 1);
  // Past the wait-reason interval: the started loop may have explained the
  // queue (at this same fake time) before the submission.
  Advance(absl::Seconds(1));
  coordinator_->RunPass();
  // Attempt 2 ends by +12m: 7 minutes from now (not 5, from attempt 1).
  EXPECT_TRUE(absl::StrContains(Job(waiting).wait_reason(), "in 7m"))
      << Job(waiting).wait_reason();
}

TEST_F(CoordinatorTest, ACancelGetsItsStopAgainOnReattachAndEndsAfterGrace) {
  auto a = Attach("a", 1);
  const std::string id = Submit(1, 1);
  coordinator_->RunPass();
  Report("a", Ref(id, 1), v1::ATTEMPT_PHASE_RUNNING);
  ASSERT_EQ(coordinator_->Cancel(id, "")->state(), v1::JOB_STATE_CANCELLING);
  EXPECT_EQ(a->stops().size(), 1u);
  // The worker lost its stream before acting on the stop, and comes back
  // still running the attempt.
  auto again = Attach("a", 1, {Ref(id, 1)});
  ASSERT_EQ(again->stops().size(), 1u);
  EXPECT_EQ(again->stops()[0].attempt().job_id(), id);
  // It never confirms: after grace + margin the cancel ends anyway.
  Advance(absl::Seconds(39));
  Heartbeat("a");
  coordinator_->RunPass();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_CANCELLING);
  Advance(absl::Seconds(2));
  Heartbeat("a");
  coordinator_->RunPass();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(CoordinatorTest, ANodeThatSucceededMayGoAwayAndPlateaudMayRestart) {
  Attach("a", 1);
  Attach("b", 1);
  const std::string id = Submit(2, 1);
  coordinator_->RunPass();
  Report("a", Ref(id, 1), v1::ATTEMPT_PHASE_SUCCEEDED);
  // a re-attaches without the attempt (it finished), then goes silent.
  Attach("a", 1);
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SCHEDULED);
  Advance(kNodeTimeout + absl::Seconds(1));
  Heartbeat("b");
  coordinator_->RunPass();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SCHEDULED);
  // A restart remembers a's report.
  Report("b", Ref(id, 1), v1::ATTEMPT_PHASE_RUNNING);
  Open();
  coordinator_->Start();
  Attach("b", 1, {Ref(id, 1)});
  coordinator_->RunPass();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  Report("b", Ref(id, 1), v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(CoordinatorTest, DevicesOfAnEndedAttemptWaitForItsRanksToStop) {
  Attach("a", 1);
  auto b = Attach("b", 1);
  const std::string failed = Submit(2, 1, /*max_restarts=*/0);
  coordinator_->RunPass();
  Report("a", Ref(failed, 1), v1::ATTEMPT_PHASE_FAILED);
  ASSERT_EQ(Job(failed).state(), v1::JOB_STATE_FAILED);
  ASSERT_EQ(b->stops().size(), 1u);
  const std::string next = Submit(2, 1);
  coordinator_->RunPass();
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_QUEUED);  // b still stopping
  Report("b", Ref(failed, 1), v1::ATTEMPT_PHASE_STOPPED);
  coordinator_->RunPass();
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, HeldDevicesAreFreeAfterTheGracePeriod) {
  Attach("a", 1);
  Attach("b", 1);
  const std::string failed = Submit(2, 1, /*max_restarts=*/0);
  coordinator_->RunPass();
  Report("a", Ref(failed, 1), v1::ATTEMPT_PHASE_FAILED);
  const std::string next = Submit(2, 1);
  Advance(absl::Seconds(5));
  Heartbeat("a");
  Heartbeat("b");
  coordinator_->RunPass();
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_QUEUED);
  Advance(absl::Seconds(36));  // past 30 s grace + 10 s margin
  Heartbeat("a");
  Heartbeat("b");
  coordinator_->RunPass();
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, OnlyTheAttemptsNodesReportOnIt) {
  Attach("a", 1);
  Attach("b", 1);
  const std::string id = Submit(1, 1);
  coordinator_->RunPass();
  const std::string on = Job(id).allocation().nodes(0).node();
  const std::string other = on == "a" ? "b" : "a";
  Report(other, Ref(id, 1), v1::ATTEMPT_PHASE_SUCCEEDED);
  v1::WorkerMessage progress;
  *progress.mutable_progress()->mutable_attempt() = Ref(id, 1);
  progress.mutable_progress()->mutable_progress()->set_step(9);
  coordinator_->OnWorkerMessage(other, progress);
  v1::WorkerMessage logs;
  v1::WorkerLogLine& line = *logs.mutable_logs()->add_lines();
  line.set_job_id(id);
  line.set_attempt(1);
  line.set_text("forged");
  coordinator_->OnWorkerMessage(other, logs);
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(job.progress().step(), 0);
  EXPECT_EQ(job.log_lines(), 0);
  EXPECT_FALSE(coordinator_->NodeMayUseScope(other, RendezvousKey(id, 1)));
  EXPECT_TRUE(coordinator_->NodeMayUseScope(on, RendezvousKey(id, 1)));
  EXPECT_FALSE(coordinator_->NodeMayUseScope(on, RendezvousKey(id, 2)));
  EXPECT_FALSE(coordinator_->NodeMayUseScope(on, "garbage"));
  coordinator_->OnWorkerMessage(on, progress);
  coordinator_->OnWorkerMessage(on, logs);
  job = Job(id);
  EXPECT_EQ(job.progress().step(), 9);
  EXPECT_EQ(job.log_lines(), 1);
}

TEST_F(CoordinatorTest, FairShareUseIsKeptAcrossARestart) {
  Attach("a", 1);
  const std::string used = Submit(1, 1);
  coordinator_->RunPass();
  Report("a", Ref(used, 1), v1::ATTEMPT_PHASE_RUNNING);
  // ada holds the device for an hour.
  Advance(absl::Hours(1));
  Heartbeat("a");
  coordinator_->RunPass();
  Report("a", Ref(used, 1), v1::ATTEMPT_PHASE_SUCCEEDED);
  Open();
  coordinator_->Start();
  const std::string ada = Submit(1, 1);
  Advance(absl::Seconds(1));
  // Later, but bob has used nothing: he goes first, as before the restart.
  const std::string bob =
      Submit(1, 1, 0, absl::ZeroDuration(), /*priority=*/0, "bob");
  // The node comes back only now: Start() runs passes of its own, and one
  // between the two submissions would place ada, the only job then waiting.
  Attach("a", 1);
  coordinator_->RunPass();
  EXPECT_EQ(Job(bob).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Job(ada).state(), v1::JOB_STATE_QUEUED);
}

// Fair share through the coordinator itself (its JobManager, node registry,
// passes and fair share), on 100 nodes x 8 devices attached as workers do,
// over a simulated day: the scenario of daemon/scheduler/fair_share_test's
// pure simulation, with every job submitted, admitted, placed, started and
// finished through the coordinator's own calls.
class SimulatedDayTest : public CoordinatorTest {
 protected:
  struct Simulated {
    std::string owner;
    int devices = 1;
    absl::Duration run_time;
    std::optional<absl::Time> start;
    std::string node;
  };

  // Device-hours per user over the day.
  std::map<std::string, double> Day(bool fair_share) {
    options_.shares = {{"ada", 1.0}, {"bob", 1.0}, {"cyd", 2.0}};
    options_.fair_share_half_life =
        fair_share ? absl::Hours(24 * 7) : absl::ZeroDuration();
    Open();
    constexpr int kNodes = 100;
    for (int i = 0; i < kNodes; ++i) {
      Attach(absl::StrFormat("node-%03d", i), 8);
    }
    std::mt19937 random(7);
    std::map<std::string, Simulated> jobs;
    std::map<std::string, double> device_hours;
    const absl::Duration step = absl::Minutes(1);
    for (int minute = 0; minute < 24 * 60; ++minute) {
      Advance(step);
      for (auto& [id, job] : jobs) {
        if (job.start.has_value() && now() >= *job.start + job.run_time) {
          Report(job.node, Ref(id, 1), v1::ATTEMPT_PHASE_SUCCEEDED);
        }
      }
      std::map<std::string, int> queued;
      for (auto it = jobs.begin(); it != jobs.end();) {
        if (Job(it->first).state() == v1::JOB_STATE_SUCCEEDED) {
          it = jobs.erase(it);
          continue;
        }
        if (!it->second.start.has_value()) ++queued[it->second.owner];
        ++it;
      }
      // Every user keeps 30 jobs waiting.
      for (const char* user : {"ada", "bob", "cyd"}) {
        for (int i = queued[user]; i < 30; ++i) {
          Simulated job;
          job.owner = user;
          job.devices = 1 << (random() % 4);
          job.run_time = absl::Minutes(10 + random() % 111);
          jobs.emplace(Submit(1, job.devices, 0, job.run_time, 0, user),
                       std::move(job));
        }
      }
      for (int i = 0; i < kNodes; ++i) {
        Heartbeat(absl::StrFormat("node-%03d", i));
      }
      coordinator_->RunPass();
      for (auto& [id, job] : jobs) {
        if (job.start.has_value()) continue;
        const v1::Job record = Job(id);
        if (record.state() != v1::JOB_STATE_SCHEDULED) continue;
        job.start = now();
        job.node = record.allocation().nodes(0).node();
        Report(job.node, Ref(id, 1), v1::ATTEMPT_PHASE_RUNNING);
      }
      for (const auto& [id, job] : jobs) {
        if (job.start.has_value()) {
          device_hours[job.owner] += job.devices * absl::ToDoubleHours(step);
        }
      }
    }
    double total = 0.0;
    for (const auto& [user, hours] : device_hours) total += hours;
    for (auto& [user, hours] : device_hours) hours /= total;
    return device_hours;
  }

  absl::Time now() {
    absl::MutexLock lock(&clock_mutex_);
    return now_;
  }
};

TEST_F(SimulatedDayTest, EachUserGetsTheirShareThroughTheCoordinator) {
  const std::map<std::string, double> fair = Day(/*fair_share=*/true);
  const std::map<std::string, double> fifo = Day(/*fair_share=*/false);
  const std::map<std::string, double> shares = {
      {"ada", 0.25}, {"bob", 0.25}, {"cyd", 0.5}};
  for (const auto& [user, share] : shares) {
    std::printf(
        "%s: share %.2f, device-hours %.4f with fair share, %.4f first come "
        "first served\n",
        user.c_str(), share, fair.at(user), fifo.at(user));
    EXPECT_NEAR(fair.at(user) / share, 1.0, 0.05) << user;
  }
  EXPECT_LT(fifo.at("cyd"), 0.4);
}

TEST_F(CoordinatorTest, ReplayedSubmissionsAreNotCounted) {
  v1::JobSpec spec;
  spec.mutable_resources()->set_nodes(1);
  spec.mutable_resources()->set_devices_per_node(1);
  spec.mutable_data()->set_path("data/x");
  ASSERT_TRUE(coordinator_->Submit(spec, "", "ada", "key").ok());
  ASSERT_TRUE(coordinator_->Submit(spec, "", "ada", "key").ok());
  EXPECT_EQ(Counter("plateau_jobs_submitted_total"), 1);
}

class ReadRootsTest : public CoordinatorTest {
 protected:
  ReadRootsTest() {
    options_.read_roots.cluster = {"/datasets"};
    options_.read_roots.per_user["bob"] = {"/home/bob/data"};
    Open();
  }

  absl::StatusOr<v1::Job> SubmitReading(const std::string& owner,
                                        const std::string& data_path,
                                        const std::string& init_from = "") {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(
        "name: test\n"
        "model: {layers: 1, d_model: 32, heads: 2, experts: 8, top_k: 1,\n"
        "        ffn_hidden: 32, vocab: 64, seq_len: 16}\n"
        "parallel: {ep: 1, pp: 1, dp: 1}\n"
        "data: {path: '",
        data_path,
        "', batch_tokens: 128}\n"
        "train: {steps: 100}\n"));
    if (!spec.ok()) return spec.status();
    spec->set_init_from(init_from);
    return coordinator_->Submit(*spec, "", owner, "");
  }
};

// Submit refuses, lexically, what lies outside the owner's roots; every
// attempt carries the owner's roots for its ranks to enforce.
TEST_F(ReadRootsTest, SubmitChecksAndStartsCarryTheOwnersRoots) {
  auto node = Attach("a", 4);
  EXPECT_TRUE(SubmitReading("ada", "data/x").ok());
  EXPECT_TRUE(SubmitReading("ada", "/datasets/web", "models/m").ok());
  for (const auto& [owner, path, init_from] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"ada", "/etc/shadow", ""},
           {"ada", "../../root", ""},
           {"ada", "/home/bob/data/x", ""},
           {"ada", "data/x", "/etc"},
           {"ada", "data/x", "runs/j-1/checkpoints"}}) {
    const absl::StatusOr<v1::Job> refused =
        SubmitReading(owner, path, init_from);
    EXPECT_TRUE(absl::IsPermissionDenied(refused.status()))
        << path << " " << init_from << ": " << refused.status();
    EXPECT_TRUE(
        absl::StrContains(refused.status().message(),
                          init_from.empty() ? "data.path: '" : "init_from: '"))
        << refused.status();
  }
  const absl::StatusOr<v1::Job> bobs = SubmitReading("bob", "/home/bob/data/x");
  ASSERT_TRUE(bobs.ok()) << bobs.status();

  coordinator_->RunPass();
  std::map<std::string, std::vector<std::string>> roots_by_job;
  for (const v1::StartAttempt& start : node->starts()) {
    roots_by_job[start.attempt().job_id()] = {start.read_roots().begin(),
                                              start.read_roots().end()};
  }
  ASSERT_EQ(roots_by_job.count(bobs->id()), 1u);
  EXPECT_EQ(roots_by_job[bobs->id()],
            (std::vector<std::string>{"data", "models", "/datasets",
                                      "/home/bob/data"}));
  for (const auto& [job_id, roots] : roots_by_job) {
    if (job_id == bobs->id()) continue;
    EXPECT_EQ(roots, (std::vector<std::string>{"data", "models", "/datasets"}))
        << job_id;
  }
}

class PreemptionTest : public CoordinatorTest {
 protected:
  PreemptionTest() {
    options_.preemption_priority_gap = 50;
    options_.max_preemptions_per_hour = 1;
    Open();
  }
};

TEST_F(PreemptionTest, TheVictimCheckpointsAndRequeuesWithoutARestart) {
  auto a = Attach("a", 2);
  const std::string low =
      Submit(1, 2, /*max_restarts=*/0, absl::ZeroDuration(), /*priority=*/10);
  coordinator_->RunPass();
  Report("a", Ref(low, 1), v1::ATTEMPT_PHASE_RUNNING);
  ReportCheckpoint("a", Ref(low, 1), 20);
  // 49 above it: within the gap, it waits.
  const std::string near = Submit(1, 2, 0, absl::ZeroDuration(), 59);
  coordinator_->RunPass();
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(coordinator_->Cancel(near, "").ok());

  const std::string high = Submit(1, 2, 0, absl::ZeroDuration(), 60);
  coordinator_->RunPass();
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_EQ(Job(high).state(), v1::JOB_STATE_QUEUED);
  ASSERT_EQ(a->stops().size(), 1u);
  EXPECT_EQ(a->stops()[0].attempt().job_id(), low);
  EXPECT_THAT(a->stops()[0].reason(),
              ::testing::StartsWith(absl::StrCat("preempted: job ", high)));
  // The stop's checkpoint arrives before the ranks' exit.
  ReportCheckpoint("a", Ref(low, 1), 23);
  Report("a", Ref(low, 1), v1::ATTEMPT_PHASE_STOPPED);
  v1::Job victim = Job(low);
  EXPECT_EQ(victim.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(victim.restarts(), 0);
  EXPECT_EQ(victim.preemptions(), 1);
  EXPECT_EQ(victim.progress().checkpoint_step(), 23);
  EXPECT_EQ(Counter("plateau_jobs_preempted_total"), 1);
  EXPECT_EQ(Counter("plateau_job_restarts_total"), 0);
  // Who preempted whom, and why, in both histories.
  ASSERT_EQ(Events(low, v1::JOB_EVENT_KIND_PREEMPTED).size(), 1u);
  EXPECT_THAT(Events(low, v1::JOB_EVENT_KIND_PREEMPTED)[0],
              ::testing::HasSubstr(absl::StrCat("preempted: job ", high)));
  EXPECT_THAT(Events(low, v1::JOB_EVENT_KIND_REQUEUED).back(),
              ::testing::HasSubstr("stopped for preemption; requeued without "
                                   "using a restart (0 of 0 used), resuming "
                                   "from step 23"));
  ASSERT_EQ(Events(high, v1::JOB_EVENT_KIND_PREEMPTING).size(), 1u);
  EXPECT_THAT(Events(high, v1::JOB_EVENT_KIND_PREEMPTING)[0],
              ::testing::HasSubstr(absl::StrCat("preempting job ", low)));

  coordinator_->RunPass();
  EXPECT_EQ(Job(high).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_QUEUED);
  Report("a", Ref(high, 1), v1::ATTEMPT_PHASE_SUCCEEDED);
  coordinator_->RunPass();
  // The victim resumes from the checkpoint its stop wrote.
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(a->starts().back().attempt().attempt(), 2);
  EXPECT_EQ(a->starts().back().checkpoint_location(),
            absl::StrCat("runs/", low, "/checkpoints/step-23"));
}

TEST_F(PreemptionTest, AJobIsPreemptedAtMostMaxPerHour) {
  auto a = Attach("a", 2);
  const std::string low = Submit(1, 2, 0, absl::ZeroDuration(), 0);
  coordinator_->RunPass();
  const std::string first = Submit(1, 2, 0, absl::ZeroDuration(), 100);
  coordinator_->RunPass();
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_PREEMPTING);
  Report("a", Ref(low, 1), v1::ATTEMPT_PHASE_STOPPED);
  coordinator_->RunPass();
  Report("a", Ref(first, 1), v1::ATTEMPT_PHASE_SUCCEEDED);
  coordinator_->RunPass();
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_SCHEDULED);
  Report("a", Ref(low, 2), v1::ATTEMPT_PHASE_RUNNING);

  // Within the hour of its preemption it is not preempted again...
  const std::string second = Submit(1, 2, 0, absl::ZeroDuration(), 100);
  Advance(absl::Minutes(59));
  Heartbeat("a");
  coordinator_->RunPass();
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(second).state(), v1::JOB_STATE_QUEUED);
  // ... and from then on it is, across a plateaud restart too.
  Open();
  coordinator_->Start();
  Attach("a", 2, {Ref(low, 2)});
  Advance(absl::Minutes(1) + absl::Seconds(1));
  Heartbeat("a");
  coordinator_->RunPass();
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_EQ(Job(low).preemptions(), 2);
  // Only the last hour's preemption times are kept.
  EXPECT_EQ(Job(low).recent_preemption_times_size(), 1);
}

TEST_F(PreemptionTest, APreemptionSurvivesAPlateaudRestartAndACancelEndsIt) {
  Attach("a", 2);
  const std::string low = Submit(1, 2, 0, absl::ZeroDuration(), 0);
  coordinator_->RunPass();
  Report("a", Ref(low, 1), v1::ATTEMPT_PHASE_RUNNING);
  Submit(1, 2, 0, absl::ZeroDuration(), 100);
  coordinator_->RunPass();
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_PREEMPTING);
  // plateaud restarts before the ranks stopped: the node gets the stop
  // again when it re-attaches still running the attempt.
  Open();
  coordinator_->Start();
  auto again = Attach("a", 2, {Ref(low, 1)});
  ASSERT_EQ(again->stops().size(), 1u);
  EXPECT_EQ(again->stops()[0].reason(), "preempted");
  // A cancel while preempting ends as a cancel.
  EXPECT_EQ(coordinator_->Cancel(low, "")->state(), v1::JOB_STATE_CANCELLING);
  Report("a", Ref(low, 1), v1::ATTEMPT_PHASE_STOPPED);
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(PreemptionTest, AnUnconfirmedPreemptionEndsAfterGraceAndRequeues) {
  Attach("a", 2);
  const std::string low = Submit(1, 2, 0, absl::ZeroDuration(), 0);
  coordinator_->RunPass();
  const std::string high = Submit(1, 2, 0, absl::ZeroDuration(), 100);
  coordinator_->RunPass();
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_PREEMPTING);
  Advance(absl::Seconds(41));  // past 30 s grace + 10 s margin
  Heartbeat("a");
  coordinator_->RunPass();
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Job(low).restarts(), 0);
  coordinator_->RunPass();
  EXPECT_EQ(Job(high).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(PreemptionTest, ADrainWithPreemptMovesTheNodesJobsElsewhere) {
  auto a = Attach("a", 2);
  const std::string job = Submit(1, 2);
  coordinator_->RunPass();
  ASSERT_EQ(Job(job).allocation().nodes(0).node(), "a");
  Report("a", Ref(job, 1), v1::ATTEMPT_PHASE_RUNNING);
  Attach("b", 2);
  ASSERT_TRUE(coordinator_
                  ->SetNodeDrain("a", true, "new NIC",
                                 /*preempt=*/true)
                  .ok());
  EXPECT_EQ(Job(job).state(), v1::JOB_STATE_PREEMPTING);
  ASSERT_EQ(a->stops().size(), 1u);
  EXPECT_EQ(a->stops()[0].reason(), "preempted: node a is draining (new NIC)");
  Report("a", Ref(job, 1), v1::ATTEMPT_PHASE_STOPPED);
  coordinator_->RunPass();
  ASSERT_EQ(Job(job).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Job(job).allocation().nodes(0).node(), "b");
  EXPECT_EQ(Job(job).restarts(), 0);
}

TEST_F(CoordinatorTest, WithoutAGapNothingIsPreempted) {
  Attach("a", 2);
  const std::string low = Submit(1, 2, 0, absl::ZeroDuration(), 0);
  coordinator_->RunPass();
  const std::string high = Submit(1, 2, 0, absl::ZeroDuration(), 1000);
  coordinator_->RunPass();
  EXPECT_EQ(Job(low).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Job(high).state(), v1::JOB_STATE_QUEUED);
}

}  // namespace
}  // namespace plateau::daemon
