#include "daemon/scheduler/fair_share.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "daemon/scheduler/gang_scheduler.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

TEST(FairShareTest, UseDecaysWithTheHalfLife) {
  FairShare fair({{"ada", 2.0}}, 1.0, absl::Hours(1));
  fair.Advance(kStart, {{"ada", 2}});  // sets the clock only
  EXPECT_EQ(fair.Use("ada"), 0.0);
  // Two devices over one half-life: 2 x 3600 / ln 2 x (1 - 1/2).
  fair.Advance(kStart + absl::Hours(1), {{"ada", 2}, {"bob", 1}});
  const double one_hour = 3600.0 / std::log(2.0) / 2.0;
  EXPECT_NEAR(fair.Use("ada"), 2 * one_hour, 1e-6);
  EXPECT_NEAR(fair.Use("bob"), one_hour, 1e-6);
  // Idle for a half-life: halved. Shares divide it.
  fair.Advance(kStart + absl::Hours(2), {});
  EXPECT_NEAR(fair.Use("ada"), one_hour, 1e-6);
  EXPECT_NEAR(fair.UsePerShare("ada"), one_hour / 2.0, 1e-6);
  EXPECT_NEAR(fair.UsePerShare("bob"), one_hour / 2.0, 1e-6);
  EXPECT_EQ(fair.UsePerShare("cyd"), 0.0);
  // Time that does not move changes nothing.
  fair.Advance(kStart + absl::Hours(2), {{"ada", 100}});
  EXPECT_NEAR(fair.Use("ada"), one_hour, 1e-6);
}

TEST(FairShareTest, AmongEqualPrioritiesTheUserBelowTheirShareGoesFirst) {
  SchedulerInput input;
  input.now = kStart;
  input.nodes = {{"a", 1, {0}, 0}};
  WaitingJob first;
  first.job_id = "j-1";
  first.owner = "heavy";
  first.submit_time = kStart - absl::Hours(1);
  first.use_per_share = 10.0;
  WaitingJob second = first;
  second.job_id = "j-2";
  second.owner = "light";
  second.submit_time = kStart;
  second.use_per_share = 1.0;
  input.waiting = {first, second};
  SchedulerDecision decision = Schedule(input);
  ASSERT_EQ(decision.starts.size(), 1);
  EXPECT_EQ(decision.starts[0].job_id, "j-2");
  // Priority still comes first.
  input.waiting[0].priority = 60;
  decision = Schedule(input);
  ASSERT_EQ(decision.starts.size(), 1);
  EXPECT_EQ(decision.starts[0].job_id, "j-1");
}

// A simulated day on 100 nodes of 8 devices: users ada, bob and cyd with
// shares 1:1:2 each keep 30 jobs waiting (1 to 8 devices on one node, 10 to
// 120 minutes, their time limit the run time), and every minute the
// scheduler places jobs as the coordinator's pass does, fair share advanced
// by the devices held. Returns each user's device-hours over the day.
std::map<std::string, double> SimulatedDay(bool fair_share) {
  const std::vector<std::string> users = {"ada", "bob", "cyd"};
  FairShare fair({{"ada", 1.0}, {"bob", 1.0}, {"cyd", 2.0}}, 1.0,
                 absl::Hours(24 * 7));
  std::mt19937 random(7);
  std::vector<SchedulableNode> nodes;
  for (int n = 0; n < 100; ++n) {
    nodes.push_back(
        {absl::StrFormat("n%03d", n), 8, {0, 1, 2, 3, 4, 5, 6, 7}, 0});
  }
  // A job runs for exactly its time limit: it ends at its expected_end.
  std::vector<RunningJob> running;
  std::vector<WaitingJob> waiting;
  int next_id = 0;
  std::map<std::string, double> device_hours;
  const absl::Duration step = absl::Minutes(1);
  for (absl::Time now = kStart; now < kStart + absl::Hours(24); now += step) {
    // Jobs that ended give their devices back.
    for (auto it = running.begin(); it != running.end();) {
      if (*it->expected_end > now) {
        ++it;
        continue;
      }
      for (const NodeDevices& devices : it->allocation) {
        for (SchedulableNode& node : nodes) {
          if (node.name != devices.node) continue;
          node.free_device_indices.insert(node.free_device_indices.end(),
                                          devices.device_indices.begin(),
                                          devices.device_indices.end());
          std::sort(node.free_device_indices.begin(),
                    node.free_device_indices.end());
        }
      }
      it = running.erase(it);
    }
    // Every user keeps 30 jobs waiting.
    for (const std::string& user : users) {
      const int queued = std::count_if(
          waiting.begin(), waiting.end(),
          [&](const WaitingJob& job) { return job.owner == user; });
      for (int i = queued; i < 30; ++i) {
        WaitingJob job;
        job.job_id = absl::StrFormat("j-%08d", next_id++);
        job.owner = user;
        job.submit_time = now;
        job.devices_per_node = 1 << (random() % 4);
        job.time_limit = absl::Minutes(10 + random() % 111);
        waiting.push_back(job);
      }
    }
    std::map<std::string, int64_t> held;
    for (const RunningJob& job : running) {
      for (const NodeDevices& devices : job.allocation) {
        held[job.owner] += devices.device_indices.size();
      }
    }
    fair.Advance(now, held);
    SchedulerInput input;
    input.now = now;
    input.nodes = nodes;
    input.explain_waiting = false;
    input.running = running;
    for (WaitingJob& job : waiting) {
      job.use_per_share = fair_share ? fair.UsePerShare(job.owner) : 0.0;
    }
    input.waiting = waiting;
    const SchedulerDecision decision = Schedule(input);
    for (const Placement& placement : decision.starts) {
      const auto found = std::find_if(waiting.begin(), waiting.end(),
                                      [&](const WaitingJob& job) {
                                        return job.job_id == placement.job_id;
                                      });
      for (const NodeDevices& devices : placement.allocation) {
        for (SchedulableNode& node : nodes) {
          if (node.name != devices.node) continue;
          std::vector<int>& free = node.free_device_indices;
          for (int index : devices.device_indices) {
            free.erase(std::find(free.begin(), free.end(), index));
          }
        }
      }
      running.push_back({found->job_id, found->owner, placement.allocation,
                         now + *found->time_limit});
      waiting.erase(found);
    }
    for (const RunningJob& job : running) {
      for (const NodeDevices& devices : job.allocation) {
        device_hours[job.owner] +=
            devices.device_indices.size() * absl::ToDoubleHours(step);
      }
    }
  }
  return device_hours;
}

TEST(FairShareTest, ASimulatedDayGivesEachUserTheirShare) {
  const std::map<std::string, double> expected_share = {
      {"ada", 0.25}, {"bob", 0.25}, {"cyd", 0.5}};
  const auto shares_of = [](const std::map<std::string, double>& hours) {
    double total = 0.0;
    for (const auto& [user, value] : hours) total += value;
    std::map<std::string, double> shares;
    for (const auto& [user, value] : hours) shares[user] = value / total;
    return shares;
  };
  const std::map<std::string, double> fair = shares_of(SimulatedDay(true));
  const std::map<std::string, double> fifo = shares_of(SimulatedDay(false));
  for (const auto& [user, share] : expected_share) {
    std::printf(
        "%s: share %.2f, device-hours %.4f with fair share, %.4f "
        "first come first served\n",
        user.c_str(), share, fair.at(user), fifo.at(user));
  }
  for (const auto& [user, share] : expected_share) {
    EXPECT_NEAR(fair.at(user) / share, 1.0, 0.05)
        << user << " had " << fair.at(user) << " of the device-hours";
  }
  // Without fair share the order is first come, first served: cyd, who
  // submits like the others, gets about a third, not half.
  EXPECT_LT(fifo.at("cyd"), 0.4);
}

}  // namespace
}  // namespace plateau::daemon
