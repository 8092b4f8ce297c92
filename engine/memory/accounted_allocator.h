// The accounted allocator: every engine tensor's bytes come from here, charged
// to a (pool, component). It keeps current and peak bytes per (pool,
// component) and per pool, and enforces the device pool's capacity so that
// the CPU backend runs out of "device" memory exactly where a GPU would, with
// an error naming the component and the bytes asked.
//
// Freed blocks are cached by exact size and reused (shapes repeat every step);
// the capacity applies to live plus cached bytes, and the cache is dropped
// before an allocation is refused. Usage figures count live bytes only.
// Thread-safe.
#ifndef PLATEAU_ENGINE_MEMORY_ACCOUNTED_ALLOCATOR_H_
#define PLATEAU_ENGINE_MEMORY_ACCOUNTED_ALLOCATOR_H_

#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/memory/memory_component.h"
#include "engine/memory/memory_source.h"

namespace plateau::engine {

struct MemoryUsage {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

class AccountedAllocator;

// Told of every allocation and free, in order, under the allocator's lock
// (so it must not call back into the allocator): how the footprint tests
// hold a block's real allocations against its footprint.
class AllocationObserver {
 public:
  virtual ~AllocationObserver() = default;
  virtual void OnAllocate(MemoryPool pool, MemoryComponent component,
                          int64_t bytes) = 0;
  virtual void OnFree(MemoryPool pool, MemoryComponent component,
                      int64_t bytes) = 0;
};

// Owns one block; returns it to its allocator when destroyed. Move-only.
class Allocation {
 public:
  Allocation() = default;
  Allocation(Allocation&& other) noexcept;
  Allocation& operator=(Allocation&& other) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation();

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemoryPool pool() const { return pool_; }
  MemoryComponent component() const { return component_; }
  bool empty() const { return owner_ == nullptr; }
  // Frees now; the allocation becomes empty.
  void Reset();

 private:
  friend class AccountedAllocator;
  AccountedAllocator* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  MemoryPool pool_ = MemoryPool::kDevice;
  MemoryComponent component_ = MemoryComponent::kOther;
};

class AccountedAllocator {
 public:
  static constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

  struct Options {
    MemorySource* device_source = nullptr;  // Not owned.
    MemorySource* host_source = nullptr;    // Not owned.
    int64_t device_capacity_bytes = kUnlimited;
    int64_t host_capacity_bytes = kUnlimited;
    AllocationObserver* observer = nullptr;  // Not owned; may be null.
  };

  explicit AccountedAllocator(const Options& options);
  // REQUIRES: every Allocation from this allocator has been destroyed.
  ~AccountedAllocator();
  AccountedAllocator(const AccountedAllocator&) = delete;
  AccountedAllocator& operator=(const AccountedAllocator&) = delete;

  // RESOURCE_EXHAUSTED naming the pool, the component, the bytes asked and
  // what holds the pool when the block does not fit its capacity.
  absl::StatusOr<Allocation> Allocate(MemoryPool pool,
                                      MemoryComponent component, int64_t bytes);

  MemoryUsage Usage(MemoryPool pool, MemoryComponent component) const;
  MemoryUsage PoolUsage(MemoryPool pool) const;
  int64_t capacity_bytes(MemoryPool pool) const;
  // Live plus cached bytes: what the pool holds from its source.
  int64_t reserved_bytes(MemoryPool pool) const;

  // Peaks restart from the current figures (e.g. after initialisation).
  void ResetPeaks();
  // Returns every cached block to its source.
  void ReleaseCache();

 private:
  friend class Allocation;

  struct PoolState {
    MemorySource* source = nullptr;
    int64_t capacity_bytes = kUnlimited;
    int64_t cached_bytes = 0;
    MemoryUsage total;
    MemoryUsage components[kMemoryComponentCount];
    std::map<int64_t, std::vector<void*>> cache;  // by exact size
  };

  void Free(MemoryPool pool, MemoryComponent component, void* data,
            int64_t bytes);
  void ReleaseCacheLocked(PoolState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status ExhaustedError(MemoryPool pool, MemoryComponent component,
                              int64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  AllocationObserver* const observer_;
  mutable absl::Mutex mutex_;
  PoolState pools_[kMemoryPoolCount] ABSL_GUARDED_BY(mutex_);
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_ACCOUNTED_ALLOCATOR_H_
