#include "engine/memory/copy_engine.h"

#include <chrono>
#include <cstdint>
#include <future>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

TEST(CopyEngineTest, CopiesInOrderAndWaitCoversEarlierCopies) {
  kernels::cpu::CpuOps ops(1);
  CopyEngine engine(&ops);
  constexpr int64_t kElements = 1 << 20;
  std::vector<float> source(kElements);
  std::iota(source.begin(), source.end(), 0.0f);
  std::vector<float> middle(kElements, -1.0f);
  std::vector<float> destination(kElements, -1.0f);
  // The second copy reads what the first wrote: only in-order execution
  // gives the source back.
  engine.ToHost(kElements * 4, source.data(), middle.data());
  const CopyEngine::Ticket last =
      engine.FromHost(kElements * 4, middle.data(), destination.data());
  engine.Wait(last);
  EXPECT_EQ(destination, source);
  EXPECT_EQ(middle, source);
}

// Ticket 0 is done before anything is submitted, and stays done while
// copies are queued: a wait for it must not block on them.
TEST(CopyEngineTest, NothingToWaitForReturnsAtOnce) {
  kernels::cpu::CpuOps ops(1);
  CopyEngine engine(&ops);
  auto wait_for_nothing = [&engine] {
    return std::async(std::launch::async, [&engine] { engine.Wait(0); });
  };
  EXPECT_EQ(wait_for_nothing().wait_for(std::chrono::seconds(5)),
            std::future_status::ready)
      << "Wait(0) blocked with no copy submitted";
  constexpr int64_t kElements = 1 << 24;  // 64 MiB a copy
  std::vector<float> source(kElements, 1.0f), destination(kElements);
  CopyEngine::Ticket last = 0;
  for (int i = 0; i < 8; ++i) {
    last = engine.ToHost(kElements * 4, source.data(), destination.data());
  }
  EXPECT_EQ(wait_for_nothing().wait_for(std::chrono::seconds(5)),
            std::future_status::ready)
      << "Wait(0) blocked on queued copies";
  engine.Wait(last);
  EXPECT_EQ(destination, source);
}

TEST(CopyEngineTest, DestructionFinishesSubmittedCopies) {
  kernels::cpu::CpuOps ops(1);
  std::vector<float> source(4096, 3.0f);
  std::vector<float> destination(4096, 0.0f);
  {
    CopyEngine engine(&ops);
    for (int i = 0; i < 16; ++i) {
      engine.ToHost(4096 * 4, source.data(), destination.data());
    }
  }
  EXPECT_EQ(destination, source);
}

}  // namespace
}  // namespace plateau::engine
