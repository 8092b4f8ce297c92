#include "engine/memory/footprint_testing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace plateau::engine {

MemorySummary Summarise(const std::vector<MemoryEvent>& events) {
  MemorySummary summary;
  std::array<std::array<int64_t, kMemoryComponentCount>, kMemoryPoolCount>
      current{};
  for (const MemoryEvent& event : events) {
    const int p = static_cast<int>(event.pool);
    const int c = static_cast<int>(event.component);
    if (event.allocate) {
      summary.allocations.push_back(
          absl::StrCat(MemoryPoolName(event.pool), " ",
                       MemoryComponentName(event.component), " ", event.bytes));
    }
    const int64_t bytes = event.allocate ? event.bytes : -event.bytes;
    current[p][c] += bytes;
    summary.live[p] += bytes;
    summary.peaks[p][c] = std::max(summary.peaks[p][c], current[p][c]);
    summary.pool_peaks[p] = std::max(summary.pool_peaks[p], summary.live[p]);
  }
  std::sort(summary.allocations.begin(), summary.allocations.end());
  return summary;
}

void ExpectSameFootprint(const std::vector<MemoryEvent>& real,
                         const std::vector<MemoryEvent>& footprint) {
  const MemorySummary a = Summarise(real), b = Summarise(footprint);
  EXPECT_EQ(a.allocations, b.allocations);
  for (int p = 0; p < kMemoryPoolCount; ++p) {
    const char* pool = MemoryPoolName(static_cast<MemoryPool>(p));
    EXPECT_EQ(a.pool_peaks[p], b.pool_peaks[p]) << pool << " pool peak";
    EXPECT_EQ(a.live[p], b.live[p]) << pool << " bytes left live";
    for (int c = 0; c < kMemoryComponentCount; ++c) {
      EXPECT_EQ(a.peaks[p][c], b.peaks[p][c])
          << pool << " " << MemoryComponentName(static_cast<MemoryComponent>(c))
          << " peak";
    }
  }
}

void RecordingObserver::OnAllocate(MemoryPool pool, MemoryComponent component,
                                   int64_t bytes) {
  if (recording) events.push_back({true, pool, component, bytes});
}

void RecordingObserver::OnFree(MemoryPool pool, MemoryComponent component,
                               int64_t bytes) {
  if (recording) events.push_back({false, pool, component, bytes});
}

FootprintSink::Handle RecordingSink::Allocate(const BufferSpec& spec) {
  specs_.push_back(spec);
  events.push_back({true, spec.pool, spec.component, spec.bytes()});
  return static_cast<Handle>(specs_.size());
}

void RecordingSink::Free(Handle* handle) {
  if (*handle == 0) return;
  const BufferSpec& spec = specs_[*handle - 1];
  events.push_back({false, spec.pool, spec.component, spec.bytes()});
  *handle = 0;
}

}  // namespace plateau::engine
