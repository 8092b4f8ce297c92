// For tests that hold a footprint to the allocations it describes: the
// allocator's events (an AllocationObserver) and a footprint's (a
// FootprintSink) recorded alike, and a comparison that requires the same
// buffers and the same peak in every pool and component.
#ifndef PLATEAU_ENGINE_MEMORY_FOOTPRINT_TESTING_H_
#define PLATEAU_ENGINE_MEMORY_FOOTPRINT_TESTING_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/memory/accounted_allocator.h"
#include "engine/memory/footprint.h"

namespace plateau::engine {

struct MemoryEvent {
  bool allocate = true;
  MemoryPool pool = MemoryPool::kDevice;
  MemoryComponent component = MemoryComponent::kOther;
  int64_t bytes = 0;
};

// What a stream of events allocated ("device dispatch 4096", sorted), the
// peaks it reached and what it left live.
struct MemorySummary {
  std::vector<std::string> allocations;
  std::array<int64_t, kMemoryPoolCount> pool_peaks{};
  std::array<std::array<int64_t, kMemoryComponentCount>, kMemoryPoolCount>
      peaks{};
  std::array<int64_t, kMemoryPoolCount> live{};
};
MemorySummary Summarise(const std::vector<MemoryEvent>& events);

// Adds a gtest failure for every difference between the two.
void ExpectSameFootprint(const std::vector<MemoryEvent>& real,
                         const std::vector<MemoryEvent>& footprint);

// The allocator's events while `recording`.
class RecordingObserver final : public AllocationObserver {
 public:
  void OnAllocate(MemoryPool pool, MemoryComponent component,
                  int64_t bytes) override;
  void OnFree(MemoryPool pool, MemoryComponent component,
              int64_t bytes) override;

  bool recording = false;
  std::vector<MemoryEvent> events;
};

// A footprint's events.
class RecordingSink final : public FootprintSink {
 public:
  Handle Allocate(const BufferSpec& spec) override;
  void Free(Handle* handle) override;

  std::vector<MemoryEvent> events;

 private:
  std::vector<BufferSpec> specs_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_FOOTPRINT_TESTING_H_
