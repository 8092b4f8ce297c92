// plateaud at cluster scale over real gRPC on loopback: 1,000 simulated
// nodes attached, the cluster filled, then 10,000 more jobs, every one of a
// spec of its own (so that no plan comes from the cache), submitted by
// concurrent clients (submit throughput, every submit durably written
// before its acknowledgement). Then scheduling passes over the 10,000-job
// queue (decision latency percentiles): passes on the full cluster, which
// start nothing, and passes that place jobs, each after one node's job has
// ended, timed with the background loop stopped so that each is the one
// that acts. With --preemption_priority_gap, every pass also weighs
// preemption, and passes that preempt are timed too: before each, a job of
// priority 1000 that needs a whole node is submitted onto the full cluster;
// the pass chooses its victims, records the preemptions and sends the
// stops; the victims' workers confirm, and the next pass starts the job.
//
// Usage: daemon_bench [--nodes N] [--devices_per_node D] [--queued J]
//   [--clients C] [--passes P] [--distinct_specs S]
//   [--fair_share_half_life H] [--preemption_priority_gap G] [--json FILE]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/test_files.h"
#include "daemon/server/daemon_server.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"
#include "tests/daemon/daemon_client.h"
#include "tests/daemon/simulated_worker.h"

ABSL_FLAG(int32_t, nodes, 1000, "simulated nodes");
ABSL_FLAG(int32_t, devices_per_node, 8, "devices per node");
ABSL_FLAG(int32_t, queued, 10000, "jobs submitted onto the full cluster");
ABSL_FLAG(int32_t, clients, 16, "concurrent submitting clients");
ABSL_FLAG(int32_t, passes, 200, "scheduling passes timed");
ABSL_FLAG(int32_t, distinct_specs, 0,
          "specs the queued jobs cycle through (0: one per job, so that no "
          "plan comes from the cache)");
ABSL_FLAG(absl::Duration, fair_share_half_life, absl::Hours(24 * 7),
          "plateaud's --fair_share_half_life (0: fair share off)");
ABSL_FLAG(int32_t, plans_per_user, 1,
          "plateaud's --plans_per_user (the clients are all one user)");
ABSL_FLAG(int32_t, preemption_priority_gap, 0,
          "plateaud's --preemption_priority_gap (0: preemption off)");

namespace plateau {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1,
                                static_cast<size_t>(fraction * values.size()));
  return values[index];
}

// Submits `count` jobs from `clients` threads; returns the wall time.
double SubmitAll(int port, int clients, int count,
                 const std::function<std::string(int)>& spec_of) {
  std::atomic<int> next{0};
  std::atomic<int> failures{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int client = 0; client < clients; ++client) {
    threads.emplace_back([&] {
      auto stub = v1::Coordinator::NewStub(testing::LocalChannel(port));
      for (int i = next++; i < count; i = next++) {
        if (!testing::Submit(*stub, spec_of(i)).ok()) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds = Seconds(start);
  if (failures > 0)
    std::fprintf(stderr, "%d submits failed\n", failures.load());
  return seconds;
}

int Run() {
  const int nodes = absl::GetFlag(FLAGS_nodes);
  const int devices = absl::GetFlag(FLAGS_devices_per_node);
  const int queued = absl::GetFlag(FLAGS_queued);
  const int clients = absl::GetFlag(FLAGS_clients);

  daemon::DaemonConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.data_dir = testing::MakeTestDirectory("daemon-bench") + "/data";
  config.node_timeout = absl::Minutes(5);
  config.heartbeat_interval = absl::Seconds(10);
  config.fair_share_half_life = absl::GetFlag(FLAGS_fair_share_half_life);
  config.preemption_priority_gap = absl::GetFlag(FLAGS_preemption_priority_gap);
  config.plans_per_user = absl::GetFlag(FLAGS_plans_per_user);
  // Without auth every client is the one user "local", who submits every
  // job here.
  config.max_active_jobs_per_user = 0;
  auto server = daemon::DaemonServer::Start(config).value();
  const int port = server->port();

  const auto attach_start = Clock::now();
  auto channel = testing::LocalChannel(port);
  std::vector<std::unique_ptr<testing::SimulatedWorker>> workers;
  for (int i = 0; i < nodes; ++i) {
    testing::SimulatedWorkerOptions options;
    options.name = absl::StrFormat("node-%04d", i);
    options.devices = devices;
    options.heartbeat_interval = absl::Seconds(10);
    workers.push_back(
        testing::SimulatedWorker::Attach(channel, options).value());
  }
  const double attach_seconds = Seconds(attach_start);

  // Fill the cluster: one whole-node job per node, no time limit.
  testing::SpecOptions filler;
  filler.name = "filler";
  filler.devices_per_node = devices;
  const std::string filler_yaml = testing::SpecYaml(filler);
  SubmitAll(port, clients, nodes, [&](int) { return filler_yaml; });
  // Wait until every filler job has started.
  const auto fill_start = Clock::now();
  size_t started = 0;
  while (started < static_cast<size_t>(nodes) && Seconds(fill_start) < 120) {
    started = 0;
    for (auto& worker : workers) started += worker->starts().size();
    absl::SleepFor(absl::Milliseconds(50));
  }

  // The queue: mixed sizes and priorities, a third with time limits; every
  // spec distinct (the name is part of it) unless --distinct_specs.
  const int distinct = absl::GetFlag(FLAGS_distinct_specs) > 0
                           ? absl::GetFlag(FLAGS_distinct_specs)
                           : queued;
  std::vector<std::string> specs;
  std::mt19937 rng(1);
  for (int i = 0; i < distinct; ++i) {
    testing::SpecOptions options;
    options.name = absl::StrCat("queued-", i);
    options.nodes = 1 + static_cast<int>(rng() % 2);
    options.devices_per_node = 1 << (rng() % 4);  // 1, 2, 4, 8
    options.priority = static_cast<int>(rng() % 100);
    if (rng() % 3 == 0) options.time_limit = absl::StrCat(1 + rng() % 60, "m");
    specs.push_back(testing::SpecYaml(options));
  }
  const double submit_seconds = SubmitAll(
      port, clients, queued, [&](int i) { return specs[i % specs.size()]; });
  const double submits_per_second = queued / submit_seconds;

  // Scheduling decisions over the full queue, on the full cluster.
  const int passes = absl::GetFlag(FLAGS_passes);
  std::vector<double> pass_seconds;
  for (int i = 0; i < passes; ++i) {
    pass_seconds.push_back(
        absl::ToDoubleSeconds(server->coordinator().RunPass()));
  }
  const double p50 = Percentile(pass_seconds, 0.50);
  const double p99 = Percentile(pass_seconds, 0.99);

  // Passes that place: before each, one node's filler job ends, and the
  // pass starts queued jobs on its devices (the decision, the synced record
  // of the placements and the start messages, all timed).
  server->coordinator().StopLoop();
  auto stub = v1::Coordinator::NewStub(channel);
  std::vector<double> placing_seconds;
  for (int i = 0; i < std::min(passes, nodes); ++i) {
    testing::SimulatedWorker& worker = *workers[i];
    const v1::AttemptRef filler = worker.starts().front().attempt();
    worker.ReportPhase(filler, v1::ATTEMPT_PHASE_RUNNING);
    worker.ReportPhase(filler, v1::ATTEMPT_PHASE_SUCCEEDED);
    if (!testing::WaitForState(*stub, filler.job_id(), v1::JOB_STATE_SUCCEEDED,
                               absl::Seconds(30))
             .ok()) {
      std::fprintf(stderr, "filler %s did not end\n", filler.job_id().c_str());
      return 1;
    }
    placing_seconds.push_back(
        absl::ToDoubleSeconds(server->coordinator().RunPass()));
  }
  // The starts reach the workers asynchronously.
  int placed = 0;
  const auto placed_start = Clock::now();
  do {
    absl::SleepFor(absl::Milliseconds(100));
    placed = 0;
    for (size_t i = 0; i < placing_seconds.size(); ++i) {
      placed += static_cast<int>(workers[i]->starts().size()) - 1;
    }
  } while (placed < static_cast<int>(placing_seconds.size()) &&
           Seconds(placed_start) < 30);
  if (placed < static_cast<int>(placing_seconds.size())) {
    std::fprintf(stderr, "%d passes placed only %d jobs\n",
                 static_cast<int>(placing_seconds.size()), placed);
    return 1;
  }
  const double placing_p50 = Percentile(placing_seconds, 0.50);
  const double placing_p99 = Percentile(placing_seconds, 0.99);

  std::vector<double> preempting_seconds;
  int preempted = 0;
  if (config.preemption_priority_gap > 0) {
    testing::SpecOptions urgent;
    urgent.devices_per_node = devices;
    urgent.priority = 1000;
    for (int i = 0; i < std::min(passes, nodes); ++i) {
      urgent.name = absl::StrCat("urgent-", i);
      const absl::StatusOr<v1::Job> job =
          testing::Submit(*stub, testing::SpecYaml(urgent));
      if (!job.ok()) {
        std::fprintf(stderr, "urgent job: %s\n",
                     std::string(job.status().message()).c_str());
        return 1;
      }
      preempting_seconds.push_back(
          absl::ToDoubleSeconds(server->coordinator().RunPass()));
      v1::ListJobsRequest request;
      request.add_states(v1::JOB_STATE_PREEMPTING);
      v1::ListJobsResponse victims;
      if (!stub->ListJobs(testing::CallContext("").get(), request, &victims)
               .ok() ||
          victims.jobs().empty()) {
        std::fprintf(stderr, "%s preempted nothing\n", job->id().c_str());
        return 1;
      }
      for (const v1::Job& victim : victims.jobs()) {
        v1::AttemptRef attempt;
        attempt.set_job_id(victim.id());
        attempt.set_attempt(victim.attempt());
        for (const v1::NodeAllocation& node : victim.allocation().nodes()) {
          int index = 0;
          absl::SimpleAtoi(node.node().substr(std::strlen("node-")), &index);
          workers[index]->ReportPhase(attempt, v1::ATTEMPT_PHASE_STOPPED);
        }
        if (!testing::WaitForState(*stub, victim.id(), v1::JOB_STATE_QUEUED,
                                   absl::Seconds(30))
                 .ok()) {
          std::fprintf(stderr, "victim %s was not requeued\n",
                       victim.id().c_str());
          return 1;
        }
        ++preempted;
      }
      server->coordinator().RunPass();
      if (!testing::WaitForState(*stub, job->id(), v1::JOB_STATE_SCHEDULED,
                                 absl::Seconds(30))
               .ok()) {
        std::fprintf(stderr, "%s did not start\n", job->id().c_str());
        return 1;
      }
    }
  }

  std::printf("%d nodes x %d devices attached in %.1f s\n", nodes, devices,
              attach_seconds);
  std::printf("submit: %d jobs from %d clients in %.2f s: %.0f submits/s\n",
              queued, clients, submit_seconds, submits_per_second);
  std::printf(
      "scheduling pass over %d queued jobs and %d nodes: p50 %.2f ms, p99 "
      "%.2f ms (%zu passes)\n",
      queued, nodes, 1e3 * p50, 1e3 * p99, pass_seconds.size());
  std::printf(
      "placing passes (one node freed before each): p50 %.2f ms, p99 %.2f "
      "ms (%zu passes, %d jobs placed)\n",
      1e3 * placing_p50, 1e3 * placing_p99, placing_seconds.size(), placed);
  nlohmann::json preemption = nullptr;
  if (!preempting_seconds.empty()) {
    const double preempting_p50 = Percentile(preempting_seconds, 0.50);
    const double preempting_p99 = Percentile(preempting_seconds, 0.99);
    std::printf(
        "preempting passes (a priority-1000 whole-node job submitted before "
        "each): p50 %.2f ms, p99 %.2f ms (%zu passes, %d jobs preempted)\n",
        1e3 * preempting_p50, 1e3 * preempting_p99, preempting_seconds.size(),
        preempted);
    preemption = {{"preempting_pass_p50_seconds", preempting_p50},
                  {"preempting_pass_p99_seconds", preempting_p99},
                  {"preempted_jobs", preempted}};
  }
  bench::WriteJsonResults({{"nodes", nodes},
                           {"queued", queued},
                           {"clients", clients},
                           {"submits_per_second", submits_per_second},
                           {"pass_p50_seconds", p50},
                           {"pass_p99_seconds", p99},
                           {"placing_pass_p50_seconds", placing_p50},
                           {"placing_pass_p99_seconds", placing_p99},
                           {"placed_jobs", placed},
                           {"preemption", preemption}});
  workers.clear();
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
