// SIGKILL plateaud while clients submit and cancel and workers report, then
// restart it on the same --data_dir: every acknowledged job is there with a
// consistent state and history, and running attempts are re-adopted when
// their workers re-attach (or requeued when they do not); what a node
// reported before the kill still counts after it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_client.h"
#include "tests/daemon/daemon_process.h"
#include "tests/daemon/simulated_worker.h"

namespace plateau::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);

struct Acknowledged {
  std::mutex mutex;
  std::map<std::string, v1::JobState> state;  // as last acknowledged
};

TEST(DaemonRestartTest, SigkillMidStreamLosesNothingAcknowledged) {
  const std::string data_dir = MakeTestDirectory("restart") + "/data";
  Acknowledged acknowledged;
  std::map<std::string, v1::AttemptRef> running_on_a;  // re-adopted later
  {
    DaemonProcess daemon(data_dir);
    auto channel = LocalChannel(daemon.port());
    std::vector<std::unique_ptr<SimulatedWorker>> workers;
    for (const char* name : {"node-a", "node-b"}) {
      SimulatedWorkerOptions options;
      options.name = name;
      options.devices = 4;
      workers.push_back(SimulatedWorker::Attach(channel, options).value());
    }
    // Workers: finish every other attempt, run the rest.
    std::atomic<bool> stop{false};
    std::thread driver([&] {
      auto stub = v1::Coordinator::NewStub(channel);
      while (!stop) {
        for (auto& worker : workers) {
          for (const v1::StartAttempt& start : worker->starts()) {
            const auto phase = start.attempt().job_id().back() % 2
                                   ? v1::ATTEMPT_PHASE_SUCCEEDED
                                   : v1::ATTEMPT_PHASE_RUNNING;
            worker->ReportPhase(start.attempt(), phase);
          }
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
    });
    // Clients: submit 100 jobs from 4 threads, cancelling every fifth; the
    // daemon is killed while they are at it.
    std::atomic<int> acks{0};
    std::vector<std::thread> clients;
    for (int client = 0; client < 4; ++client) {
      clients.emplace_back([&, client] {
        auto stub = v1::Coordinator::NewStub(channel);
        for (int i = 0; i < 40; ++i) {
          auto job = Submit(
              *stub, SpecYaml({.name = absl::StrCat("c", client, "-", i)}));
          if (!job.ok()) return;  // the daemon is gone
          {
            std::lock_guard<std::mutex> lock(acknowledged.mutex);
            acknowledged.state[job->id()] = job->state();
          }
          ++acks;
          if (i % 5 == 0) {
            v1::CancelJobRequest request;
            request.set_job_id(job->id());
            v1::Job cancelled;
            auto context = CallContext("");
            if (!stub->CancelJob(context.get(), request, &cancelled).ok()) {
              return;
            }
            std::lock_guard<std::mutex> lock(acknowledged.mutex);
            acknowledged.state[job->id()] = cancelled.state();
          }
        }
      });
    }
    while (acks < 100) absl::SleepFor(absl::Milliseconds(1));
    daemon.Kill(SIGKILL);
    for (std::thread& client : clients) client.join();
    stop = true;
    driver.join();
    for (const v1::StartAttempt& start : workers[0]->starts()) {
      running_on_a[start.attempt().job_id()] = start.attempt();
    }
  }

  // Restart. node-a comes back claiming its attempts; node-b never returns.
  DaemonProcess daemon(data_dir);
  auto channel = LocalChannel(daemon.port());
  auto stub = v1::Coordinator::NewStub(channel);
  for (const auto& [job_id, state] : acknowledged.state) {
    auto job = GetJob(*stub, job_id);
    ASSERT_TRUE(job.ok()) << job_id << ": " << job.status();
    if (state == v1::JOB_STATE_CANCELLED) {
      EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED) << job_id;
    }
    if (state == v1::JOB_STATE_CANCELLING) {
      EXPECT_TRUE(job->state() == v1::JOB_STATE_CANCELLING ||
                  job->state() == v1::JOB_STATE_CANCELLED)
          << job_id;
    }
    // The history starts with the submission, has no gaps, and ends in the
    // job's current state.
    v1::StreamLogsRequest request;
    request.set_job_id(job_id);
    auto context = CallContext("");
    auto reader = stub->StreamLogs(context.get(), request);
    v1::LogEntry entry;
    int64_t expected_sequence = 1;
    v1::JobEvent first, last;
    while (reader->Read(&entry)) {
      EXPECT_EQ(entry.sequence(), expected_sequence++) << job_id;
      if (!entry.has_event()) continue;
      if (first.sequence() == 0) first = entry.event();
      last = entry.event();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(first.kind(), v1::JOB_EVENT_KIND_SUBMITTED) << job_id;
    EXPECT_EQ(last.state(), job->state()) << job_id;
    EXPECT_EQ(job->last_log_sequence(), expected_sequence - 1) << job_id;
  }

  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.devices = 4;
  for (const auto& [job_id, attempt] : running_on_a) {
    auto job = GetJob(*stub, job_id);
    if (job.ok() && job->attempt() == attempt.attempt() &&
        (job->state() == v1::JOB_STATE_RUNNING ||
         job->state() == v1::JOB_STATE_SCHEDULED)) {
      options.running_attempts.push_back(attempt);
    }
  }
  ASSERT_FALSE(options.running_attempts.empty())
      << "no attempt was running on node-a when plateaud died";
  auto node_a = SimulatedWorker::Attach(channel, options).value();
  EXPECT_EQ(node_a->accepted().stale_attempts_size(), 0);
  // Re-adopted attempts carry on to success.
  for (const v1::AttemptRef& attempt : options.running_attempts) {
    node_a->ReportPhase(attempt, v1::ATTEMPT_PHASE_SUCCEEDED);
  }
  for (const v1::AttemptRef& attempt : options.running_attempts) {
    auto job = GetJob(*stub, attempt.job_id());
    ASSERT_TRUE(job.ok());
    if (job->state() == v1::JOB_STATE_CANCELLING) continue;
    EXPECT_TRUE(
        WaitForState(*stub, attempt.job_id(), v1::JOB_STATE_SUCCEEDED, kWait)
            .ok())
        << attempt.job_id();
  }
  // node-b did not come back: after node_timeout its attempts end (the jobs
  // have no restarts left, so they fail naming the lost node).
  v1::ListJobsRequest list;
  list.add_states(v1::JOB_STATE_RUNNING);
  list.add_states(v1::JOB_STATE_SCHEDULED);
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    v1::ListJobsResponse listed;
    auto context = CallContext("");
    ASSERT_TRUE(stub->ListJobs(context.get(), list, &listed).ok());
    bool any_on_b = false;
    for (const v1::Job& job : listed.jobs()) {
      for (const v1::NodeAllocation& node : job.allocation().nodes()) {
        any_on_b |= node.node() == "node-b";
      }
    }
    if (!any_on_b) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  v1::ListJobsRequest failed_list;
  failed_list.add_states(v1::JOB_STATE_FAILED);
  failed_list.set_page_size(1000);
  v1::ListJobsResponse failed;
  auto context = CallContext("");
  ASSERT_TRUE(stub->ListJobs(context.get(), failed_list, &failed).ok());
  bool blamed_b = false;
  for (const v1::Job& job : failed.jobs()) {
    blamed_b |= absl::StrContains(job.last_error(), "node-b");
  }
  EXPECT_TRUE(blamed_b);
}

// A node's SUCCEEDED report is persisted: after a SIGKILL, the node coming
// back without the attempt (it finished) does not fail it, and the other
// node's success completes it.
TEST(DaemonRestartTest, ANodesSuccessReportSurvivesARestart) {
  const std::string data_dir = MakeTestDirectory("restart-finished") + "/data";
  std::string job_id;
  v1::AttemptRef attempt;
  {
    DaemonProcess daemon(data_dir);
    auto channel = LocalChannel(daemon.port());
    auto stub = v1::Coordinator::NewStub(channel);
    std::vector<std::unique_ptr<SimulatedWorker>> workers;
    for (const char* name : {"node-a", "node-b"}) {
      SimulatedWorkerOptions options;
      options.name = name;
      options.devices = 1;
      workers.push_back(SimulatedWorker::Attach(channel, options).value());
    }
    auto job = Submit(*stub, SpecYaml({.nodes = 2}));
    ASSERT_TRUE(job.ok()) << job.status();
    job_id = job->id();
    for (auto& worker : workers) {
      auto start = worker->WaitForStart(job_id, kWait);
      ASSERT_TRUE(start.ok()) << start.status();
      attempt = start->attempt();
      worker->ReportPhase(attempt, v1::ATTEMPT_PHASE_RUNNING);
    }
    ASSERT_TRUE(WaitForState(*stub, job_id, v1::JOB_STATE_RUNNING, kWait).ok());
    workers[0]->ReportPhase(attempt, v1::ATTEMPT_PHASE_SUCCEEDED);
    ASSERT_TRUE(
        WaitForJob(
            *stub, job_id,
            [](const v1::Job& job) { return job.finished_nodes_size() == 1; },
            kWait)
            .ok());
    daemon.Kill(SIGKILL);
  }
  DaemonProcess daemon(data_dir);
  auto channel = LocalChannel(daemon.port());
  auto stub = v1::Coordinator::NewStub(channel);
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.devices = 1;
  auto a = SimulatedWorker::Attach(channel, options).value();
  options.name = "node-b";
  options.running_attempts = {attempt};
  auto b = SimulatedWorker::Attach(channel, options).value();
  auto job = GetJob(*stub, job_id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_RUNNING) << job->last_error();
  b->ReportPhase(attempt, v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_TRUE(WaitForState(*stub, job_id, v1::JOB_STATE_SUCCEEDED, kWait).ok());
}

}  // namespace
}  // namespace plateau::testing
