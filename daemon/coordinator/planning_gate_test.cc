#include "daemon/coordinator/planning_gate.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace plateau::daemon {
namespace {

TEST(PlanningGateTest, AUserWaitsForTheirOwnTurnOnlyAndOthersDoNot) {
  PlanningGate gate(/*plans_per_user=*/1);
  std::optional<PlanningGate::Turn> ada = gate.Enter("ada");
  std::atomic<bool> second_started{false};
  std::thread second([&] {
    PlanningGate::Turn turn = gate.Enter("ada");
    second_started = true;
  });
  // Another user plans at once, beside ada's plan.
  {
    PlanningGate::Turn bob = gate.Enter("bob");
    EXPECT_EQ(gate.Held("bob"), 1);
  }
  EXPECT_EQ(gate.Held("bob"), 0);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(second_started) << "ada's second plan ran beside her first";
  EXPECT_EQ(gate.Held("ada"), 1);
  ada.reset();
  second.join();
  EXPECT_TRUE(second_started);
  EXPECT_EQ(gate.Held("ada"), 0);
}

TEST(PlanningGateTest, HoldsAtMostTheTurnsOfAUser) {
  PlanningGate gate(/*plans_per_user=*/2);
  std::atomic<int> running{0}, most{0};
  std::vector<std::thread> plans;
  for (int i = 0; i < 8; ++i) {
    plans.emplace_back([&] {
      PlanningGate::Turn turn = gate.Enter("ada");
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      absl::SleepFor(absl::Milliseconds(20));
      --running;
    });
  }
  for (std::thread& plan : plans) plan.join();
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(gate.Held("ada"), 0);
}

}  // namespace
}  // namespace plateau::daemon
