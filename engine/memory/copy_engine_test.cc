#include "engine/memory/copy_engine.h"

#include <cstdint>
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

TEST(CopyEngineTest, NothingToWaitForReturnsAtOnce) {
  kernels::cpu::CpuOps ops(1);
  CopyEngine engine(&ops);
  engine.Wait(0);
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
