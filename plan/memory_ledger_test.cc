#include "plan/memory_ledger.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace plateau::plan {
namespace {

using engine::MemoryComponent;

TEST(MemoryLedgerTest, KeepsPeaksPerComponentAndPool) {
  MemoryLedger ledger;
  MemoryLedger::Handle weights = ledger.Allocate(
      engine::DeviceBuffer(MemoryComponent::kWeights, {1000, 10}));
  MemoryLedger::Handle activations = ledger.Allocate(
      engine::DeviceBuffer(MemoryComponent::kActivations, {500}));
  ledger.Free(&activations);
  EXPECT_EQ(activations, 0);
  ledger.Allocate(engine::DeviceBuffer(MemoryComponent::kActivations, {100}));
  EXPECT_EQ(ledger.peak_bytes(v1::MEMORY_POOL_DEVICE,
                              v1::MEMORY_COMPONENT_ACTIVATIONS),
            2000);
  EXPECT_EQ(ledger.pool_peak_bytes(v1::MEMORY_POOL_DEVICE), 42000);
  EXPECT_EQ(ledger.pool_current_bytes(v1::MEMORY_POOL_DEVICE), 40400);
  ledger.Free(&weights);
  EXPECT_TRUE(ledger.status().ok());
}

// A size past int64 is refused, not wrapped into a small peak that fits.
TEST(MemoryLedgerTest, ABufferWhoseBytesOverflowIsAnErrorNotAPeak) {
  MemoryLedger ledger;
  ledger.SetPhase("forward");
  const int64_t huge = int64_t{1} << 40;
  ledger.Allocate(engine::DeviceBuffer(MemoryComponent::kDispatch,
                                       {huge, huge}));  // 2^80 elements
  EXPECT_EQ(ledger.pool_peak_bytes(v1::MEMORY_POOL_DEVICE), 0);
  EXPECT_EQ(ledger.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.status().message(),
            "a buffer of shape [1099511627776, 1099511627776] overflows "
            "64-bit byte counts (device pool, dispatch, during forward): the "
            "model and batch sizes are beyond what can be planned");
  // 2^61 elements of 4 bytes is 2^63 bytes: one past int64.
  MemoryLedger exact;
  exact.Allocate(
      engine::DeviceBuffer(MemoryComponent::kDispatch, {int64_t{1} << 61}));
  EXPECT_FALSE(exact.status().ok());
}

TEST(MemoryLedgerTest, ATotalThatOverflowsIsAnErrorAndTheFirstOneIsKept) {
  MemoryLedger ledger;
  const int64_t half = std::numeric_limits<int64_t>::max() / 2 + 1;
  ledger.Allocate(v1::MEMORY_POOL_HOST, v1::MEMORY_COMPONENT_CHECKPOINT, half);
  ledger.SetPhase("checkpoint");
  ledger.Allocate(v1::MEMORY_POOL_HOST, v1::MEMORY_COMPONENT_STAGING, half);
  EXPECT_EQ(ledger.pool_peak_bytes(v1::MEMORY_POOL_HOST), half);
  EXPECT_NE(ledger.status().message().find(
                "adding 4611686018427387904 bytes overflows 64-bit byte "
                "counts (host pool, staging, during checkpoint)"),
            std::string::npos)
      << ledger.status();
  ledger.Allocate(
      engine::DeviceBuffer(MemoryComponent::kDispatch, {int64_t{1} << 62}));
  EXPECT_NE(ledger.status().message().find("adding"), std::string::npos)
      << "the first overflow is the one reported";
}

// A reset ledger reads as a new one, and its handles start over: the
// planner replays many ranks and routings into one.
TEST(MemoryLedgerTest, AResetLedgerIsANewOne) {
  MemoryLedger ledger;
  ledger.SetPhase("backward");
  MemoryLedger::Handle kept =
      ledger.Allocate(engine::DeviceBuffer(MemoryComponent::kDispatch, {1000}));
  ledger.Allocate(engine::DeviceBuffer(MemoryComponent::kDispatch,
                                       {int64_t{1} << 40, int64_t{1} << 40}));
  ASSERT_FALSE(ledger.status().ok());
  ledger.Reset();
  EXPECT_TRUE(ledger.status().ok());
  EXPECT_EQ(ledger.pool_peak_bytes(v1::MEMORY_POOL_DEVICE), 0);
  EXPECT_EQ(ledger.pool_current_bytes(v1::MEMORY_POOL_DEVICE), 0);
  EXPECT_EQ(
      ledger.peak_bytes(v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_DISPATCH),
      0);
  EXPECT_EQ(ledger.device_bytes_at_peak(v1::MEMORY_COMPONENT_DISPATCH), 0);
  EXPECT_EQ(ledger.device_peak_phase(), "");
  MemoryLedger::Handle first = ledger.Allocate(
      engine::DeviceBuffer(MemoryComponent::kActivations, {10}));
  EXPECT_EQ(first, kept);
  EXPECT_EQ(ledger.pool_peak_bytes(v1::MEMORY_POOL_DEVICE), 40);
  EXPECT_EQ(ledger.device_bytes_at_peak(v1::MEMORY_COMPONENT_ACTIVATIONS), 40);
  ledger.Free(&first);
  EXPECT_EQ(ledger.pool_current_bytes(v1::MEMORY_POOL_DEVICE), 0);
}

}  // namespace
}  // namespace plateau::plan
