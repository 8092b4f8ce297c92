#include "engine/memory/accounted_allocator.h"

#include <malloc.h>

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

// Counts what the allocator holds from its source, independently of the
// allocator's own figures.
class CountingSource final : public MemorySource {
 public:
  void* Allocate(size_t bytes) override {
    outstanding_bytes += static_cast<int64_t>(bytes);
    return host_.Allocate(bytes);
  }
  void Free(void* data, size_t bytes) override {
    outstanding_bytes -= static_cast<int64_t>(bytes);
    host_.Free(data, bytes);
  }
  int64_t outstanding_bytes = 0;

 private:
  HostMemorySource host_;
};

TEST(AccountedAllocatorTest, TracksCurrentAndPeakAgainstAnIndependentTally) {
  CountingSource device_source, host_source;
  AccountedAllocator::Options options;
  options.device_source = &device_source;
  options.host_source = &host_source;
  AccountedAllocator allocator(options);

  std::mt19937 rng(5);
  std::vector<Allocation> live;
  // The test's own tally: live bytes and their high-water mark.
  std::map<std::pair<int, int>, MemoryUsage> expected;
  MemoryUsage expected_device_total;
  for (int operation = 0; operation < 2000; ++operation) {
    const bool allocate = live.empty() || rng() % 3 != 0;
    if (allocate) {
      const auto pool = static_cast<MemoryPool>(rng() % kMemoryPoolCount);
      const auto component =
          static_cast<MemoryComponent>(rng() % kMemoryComponentCount);
      const int64_t bytes = 64 * static_cast<int64_t>(1 + rng() % 64);
      auto allocation = allocator.Allocate(pool, component, bytes);
      ASSERT_TRUE(allocation.ok()) << allocation.status();
      MemoryUsage& usage =
          expected[{static_cast<int>(pool), static_cast<int>(component)}];
      usage.current_bytes += bytes;
      usage.peak_bytes = std::max(usage.peak_bytes, usage.current_bytes);
      if (pool == MemoryPool::kDevice) {
        expected_device_total.current_bytes += bytes;
        expected_device_total.peak_bytes =
            std::max(expected_device_total.peak_bytes,
                     expected_device_total.current_bytes);
      }
      live.push_back(std::move(allocation).value());
    } else {
      const size_t index = rng() % live.size();
      const Allocation& victim = live[index];
      expected[{static_cast<int>(victim.pool()),
                static_cast<int>(victim.component())}]
          .current_bytes -= victim.bytes();
      if (victim.pool() == MemoryPool::kDevice) {
        expected_device_total.current_bytes -= victim.bytes();
      }
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
    }
    for (const auto& [key, usage] : expected) {
      const MemoryUsage actual =
          allocator.Usage(static_cast<MemoryPool>(key.first),
                          static_cast<MemoryComponent>(key.second));
      ASSERT_EQ(actual.current_bytes, usage.current_bytes);
      ASSERT_EQ(actual.peak_bytes, usage.peak_bytes);
    }
    const MemoryUsage device_total = allocator.PoolUsage(MemoryPool::kDevice);
    ASSERT_EQ(device_total.current_bytes, expected_device_total.current_bytes);
    ASSERT_EQ(device_total.peak_bytes, expected_device_total.peak_bytes);
    // Whatever is cached, the source has handed out exactly what the pool
    // says it reserves.
    ASSERT_EQ(device_source.outstanding_bytes,
              allocator.reserved_bytes(MemoryPool::kDevice));
  }
  live.clear();
  allocator.ReleaseCache();
  EXPECT_EQ(device_source.outstanding_bytes, 0);
  EXPECT_EQ(host_source.outstanding_bytes, 0);
}

// The accounting agrees with what the process really allocated.
TEST(AccountedAllocatorTest, MatchesTheProcessHeap) {
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  AccountedAllocator allocator(options);
  auto heap_bytes = [] {
    const struct mallinfo2 info = mallinfo2();
    return static_cast<int64_t>(info.uordblks + info.hblkhd);
  };
  const int64_t heap_before = heap_bytes();
  std::vector<Allocation> live;
  int64_t accounted = 0;
  for (int64_t megabytes : {1, 3, 8, 16, 2}) {
    auto allocation = allocator.Allocate(
        MemoryPool::kDevice, MemoryComponent::kActivations, megabytes << 20);
    ASSERT_TRUE(allocation.ok());
    accounted += megabytes << 20;
    live.push_back(std::move(allocation).value());
  }
  const int64_t heap_growth = heap_bytes() - heap_before;
  EXPECT_EQ(allocator.PoolUsage(MemoryPool::kDevice).current_bytes, accounted);
  // Page rounding and allocator headers only: under 64 KiB over five blocks.
  EXPECT_GE(heap_growth, accounted);
  EXPECT_LT(heap_growth, accounted + (64 << 10));
  live.clear();
  allocator.ReleaseCache();
  EXPECT_LT(heap_bytes() - heap_before, 64 << 10);
}

TEST(AccountedAllocatorTest, CapacityOverflowNamesComponentAndSize) {
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  options.device_capacity_bytes = 1 << 20;
  AccountedAllocator allocator(options);
  auto weights = allocator.Allocate(MemoryPool::kDevice,
                                    MemoryComponent::kWeights, 600 << 10);
  ASSERT_TRUE(weights.ok());
  auto dispatch = allocator.Allocate(MemoryPool::kDevice,
                                     MemoryComponent::kDispatch, 600 << 10);
  ASSERT_FALSE(dispatch.ok());
  EXPECT_EQ(dispatch.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(dispatch.status().message());
  EXPECT_NE(message.find("device memory exhausted"), std::string::npos);
  EXPECT_NE(message.find("dispatch asked for 600.00 KiB"), std::string::npos)
      << message;
  EXPECT_NE(message.find("weights 600.00 KiB"), std::string::npos) << message;
  // The failed request changed nothing.
  EXPECT_EQ(allocator.Usage(MemoryPool::kDevice, MemoryComponent::kDispatch)
                .peak_bytes,
            0);
  // The host pool has no capacity set.
  EXPECT_TRUE(
      allocator
          .Allocate(MemoryPool::kHost, MemoryComponent::kStaging, 600 << 10)
          .ok());
}

TEST(AccountedAllocatorTest, CachedBlocksGiveWayBeforeRefusing) {
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  options.device_capacity_bytes = 1 << 20;
  AccountedAllocator allocator(options);
  {
    auto first = allocator.Allocate(MemoryPool::kDevice,
                                    MemoryComponent::kOther, 600 << 10);
    ASSERT_TRUE(first.ok());
  }
  EXPECT_EQ(allocator.reserved_bytes(MemoryPool::kDevice), 600 << 10);
  auto second = allocator.Allocate(MemoryPool::kDevice, MemoryComponent::kOther,
                                   700 << 10);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(allocator.reserved_bytes(MemoryPool::kDevice), 700 << 10);
}

TEST(AccountedAllocatorTest, ResetPeaksRestartsFromCurrent) {
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  AccountedAllocator allocator(options);
  auto kept =
      allocator.Allocate(MemoryPool::kDevice, MemoryComponent::kWeights, 1000);
  {
    auto transient = allocator.Allocate(MemoryPool::kDevice,
                                        MemoryComponent::kWeights, 5000);
  }
  EXPECT_EQ(allocator.Usage(MemoryPool::kDevice, MemoryComponent::kWeights)
                .peak_bytes,
            6000);
  allocator.ResetPeaks();
  EXPECT_EQ(allocator.Usage(MemoryPool::kDevice, MemoryComponent::kWeights)
                .peak_bytes,
            1000);
  EXPECT_EQ(allocator.PoolUsage(MemoryPool::kDevice).peak_bytes, 1000);
}

}  // namespace
}  // namespace plateau::engine
