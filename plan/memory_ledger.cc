#include "plan/memory_ledger.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/job_spec.h"

namespace plateau::plan {
namespace {

// The proto enums count from 1 (0 is UNSPECIFIED).
int PoolIndex(v1::MemoryPool pool) { return static_cast<int>(pool) - 1; }
int ComponentIndex(v1::MemoryComponent component) {
  return static_cast<int>(component) - 1;
}

}  // namespace

void MemoryLedger::Overflowed(v1::MemoryPool pool,
                              v1::MemoryComponent component,
                              const std::string& what) {
  if (!status_.ok()) return;
  status_ = absl::InvalidArgumentError(absl::StrCat(
      what, " overflows 64-bit byte counts (",
      SpecEnumName(*v1::MemoryPool_descriptor(), pool), " pool, ",
      SpecEnumName(*v1::MemoryComponent_descriptor(), component), ", during ",
      phase_.empty() ? "set-up" : phase_,
      "): the model and batch sizes are beyond what can be planned"));
}

MemoryLedger::Handle MemoryLedger::Allocate(v1::MemoryPool pool,
                                            v1::MemoryComponent component,
                                            int64_t bytes) {
  const int p = PoolIndex(pool);
  const int c = ComponentIndex(component);
  int64_t component_total = 0, pool_total = 0;
  if (__builtin_add_overflow(current_[p][c], bytes, &component_total) ||
      __builtin_add_overflow(pool_current_[p], bytes, &pool_total)) {
    Overflowed(pool, component, absl::StrCat("adding ", bytes, " bytes"));
    bytes = 0;
  }
  live_.push_back({p, c, bytes});
  current_[p][c] += bytes;
  pool_current_[p] += bytes;
  if (current_[p][c] > peak_[p][c]) peak_[p][c] = current_[p][c];
  // A tie keeps the first moment: the phase that reached the peak first.
  if (pool_current_[p] > pool_peak_[p]) {
    pool_peak_[p] = pool_current_[p];
    if (pool == v1::MEMORY_POOL_DEVICE) {
      device_at_peak_ = current_[p];
      device_peak_phase_ = phase_;
    }
  }
  return static_cast<Handle>(live_.size());
}

void MemoryLedger::Reset() {
  current_ = {};
  peak_ = {};
  pool_current_ = {};
  pool_peak_ = {};
  device_at_peak_ = {};
  phase_.clear();
  device_peak_phase_.clear();
  status_ = absl::OkStatus();
  live_.clear();
}

void MemoryLedger::Free(Handle* handle) {
  if (*handle <= 0) return;
  Live& live = live_[*handle - 1];
  current_[live.pool][live.component] -= live.bytes;
  pool_current_[live.pool] -= live.bytes;
  live.bytes = 0;
  *handle = 0;
}

MemoryLedger::Handle MemoryLedger::Allocate(const engine::BufferSpec& spec) {
  const v1::MemoryPool pool = engine::MemoryPoolProto(spec.pool);
  const v1::MemoryComponent component =
      engine::MemoryComponentProto(spec.component);
  const std::optional<int64_t> bytes = spec.checked_bytes();
  if (!bytes.has_value()) {
    Overflowed(pool, component,
               absl::StrCat("a buffer of shape [",
                            absl::StrJoin(spec.shape, ", "), "]"));
    return Allocate(pool, component, 0);
  }
  return Allocate(pool, component, *bytes);
}

int64_t MemoryLedger::peak_bytes(v1::MemoryPool pool,
                                 v1::MemoryComponent component) const {
  return peak_[PoolIndex(pool)][ComponentIndex(component)];
}

int64_t MemoryLedger::pool_peak_bytes(v1::MemoryPool pool) const {
  return pool_peak_[PoolIndex(pool)];
}

int64_t MemoryLedger::pool_current_bytes(v1::MemoryPool pool) const {
  return pool_current_[PoolIndex(pool)];
}

int64_t MemoryLedger::device_bytes_at_peak(
    v1::MemoryComponent component) const {
  return device_at_peak_[ComponentIndex(component)];
}

}  // namespace plateau::plan
