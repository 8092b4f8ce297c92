#include "engine/memory/accounted_allocator.h"

#include <algorithm>
#include <cassert>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"

namespace plateau::engine {

Allocation::Allocation(Allocation&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      pool_(other.pool_),
      component_(other.component_) {}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    pool_ = other.pool_;
    component_ = other.component_;
  }
  return *this;
}

Allocation::~Allocation() { Reset(); }

void Allocation::Reset() {
  if (owner_ != nullptr) owner_->Free(pool_, component_, data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

AccountedAllocator::AccountedAllocator(const Options& options)
    : observer_(options.observer) {
  PoolState& device = pools_[static_cast<int>(MemoryPool::kDevice)];
  device.source = options.device_source;
  device.capacity_bytes = options.device_capacity_bytes;
  PoolState& host = pools_[static_cast<int>(MemoryPool::kHost)];
  host.source = options.host_source;
  host.capacity_bytes = options.host_capacity_bytes;
}

AccountedAllocator::~AccountedAllocator() {
  absl::MutexLock lock(&mutex_);
  for (PoolState& state : pools_) {
    assert(state.total.current_bytes == 0 && "live allocations outlive pool");
    ReleaseCacheLocked(state);
  }
}

absl::StatusOr<Allocation> AccountedAllocator::Allocate(
    MemoryPool pool, MemoryComponent component, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative allocation of ", bytes, " bytes for ",
                     MemoryComponentName(component)));
  }
  absl::MutexLock lock(&mutex_);
  PoolState& state = pools_[static_cast<int>(pool)];
  void* data = nullptr;
  auto cached = state.cache.find(bytes);
  if (cached != state.cache.end()) {
    data = cached->second.back();
    cached->second.pop_back();
    if (cached->second.empty()) state.cache.erase(cached);
    state.cached_bytes -= bytes;
  } else {
    const int64_t limit = state.capacity_bytes;
    if (state.total.current_bytes + state.cached_bytes > limit - bytes) {
      ReleaseCacheLocked(state);
    }
    if (state.total.current_bytes > limit - bytes) {
      return ExhaustedError(pool, component, bytes);
    }
    data = state.source->Allocate(static_cast<size_t>(bytes));
    if (data == nullptr) {
      ReleaseCacheLocked(state);
      data = state.source->Allocate(static_cast<size_t>(bytes));
    }
    if (data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          MemoryPoolName(pool), " memory source refused ", FormatBytes(bytes),
          " for ", MemoryComponentName(component), " (", bytes, " bytes)"));
    }
  }
  MemoryUsage& usage = state.components[static_cast<int>(component)];
  usage.current_bytes += bytes;
  usage.peak_bytes = std::max(usage.peak_bytes, usage.current_bytes);
  state.total.current_bytes += bytes;
  state.total.peak_bytes =
      std::max(state.total.peak_bytes, state.total.current_bytes);
  if (observer_ != nullptr) observer_->OnAllocate(pool, component, bytes);

  Allocation allocation;
  allocation.owner_ = this;
  allocation.data_ = data;
  allocation.bytes_ = bytes;
  allocation.pool_ = pool;
  allocation.component_ = component;
  return allocation;
}

void AccountedAllocator::Free(MemoryPool pool, MemoryComponent component,
                              void* data, int64_t bytes) {
  absl::MutexLock lock(&mutex_);
  PoolState& state = pools_[static_cast<int>(pool)];
  state.components[static_cast<int>(component)].current_bytes -= bytes;
  state.total.current_bytes -= bytes;
  state.cache[bytes].push_back(data);
  state.cached_bytes += bytes;
  if (observer_ != nullptr) observer_->OnFree(pool, component, bytes);
}

absl::Status AccountedAllocator::ExhaustedError(MemoryPool pool,
                                                MemoryComponent component,
                                                int64_t bytes) const {
  const PoolState& state = pools_[static_cast<int>(pool)];
  std::vector<std::pair<int64_t, MemoryComponent>> holders;
  for (int i = 0; i < kMemoryComponentCount; ++i) {
    if (state.components[i].current_bytes > 0) {
      holders.emplace_back(state.components[i].current_bytes,
                           static_cast<MemoryComponent>(i));
    }
  }
  std::sort(holders.rbegin(), holders.rend());
  std::vector<std::string> parts;
  for (const auto& [held_bytes, holder] : holders) {
    parts.push_back(absl::StrCat(MemoryComponentName(holder), " ",
                                 FormatBytes(held_bytes)));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      MemoryPoolName(pool), " memory exhausted: ",
      MemoryComponentName(component), " asked for ", FormatBytes(bytes), " (",
      bytes, " bytes) with ", FormatBytes(state.total.current_bytes), " of ",
      FormatBytes(state.capacity_bytes), " in use",
      parts.empty() ? ""
                    : absl::StrCat(" (", absl::StrJoin(parts, ", "), ")")));
}

void AccountedAllocator::ReleaseCacheLocked(PoolState& state) {
  for (auto& [bytes, blocks] : state.cache) {
    for (void* data : blocks)
      state.source->Free(data, static_cast<size_t>(bytes));
  }
  state.cache.clear();
  state.cached_bytes = 0;
}

MemoryUsage AccountedAllocator::Usage(MemoryPool pool,
                                      MemoryComponent component) const {
  absl::MutexLock lock(&mutex_);
  return pools_[static_cast<int>(pool)].components[static_cast<int>(component)];
}

MemoryUsage AccountedAllocator::PoolUsage(MemoryPool pool) const {
  absl::MutexLock lock(&mutex_);
  return pools_[static_cast<int>(pool)].total;
}

int64_t AccountedAllocator::capacity_bytes(MemoryPool pool) const {
  absl::MutexLock lock(&mutex_);
  return pools_[static_cast<int>(pool)].capacity_bytes;
}

int64_t AccountedAllocator::reserved_bytes(MemoryPool pool) const {
  absl::MutexLock lock(&mutex_);
  const PoolState& state = pools_[static_cast<int>(pool)];
  return state.total.current_bytes + state.cached_bytes;
}

void AccountedAllocator::ResetPeaks() {
  absl::MutexLock lock(&mutex_);
  for (PoolState& state : pools_) {
    state.total.peak_bytes = state.total.current_bytes;
    for (MemoryUsage& usage : state.components) {
      usage.peak_bytes = usage.current_bytes;
    }
  }
}

void AccountedAllocator::ReleaseCache() {
  absl::MutexLock lock(&mutex_);
  for (PoolState& state : pools_) ReleaseCacheLocked(state);
}

}  // namespace plateau::engine
