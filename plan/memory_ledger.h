// The accounted allocator's bookkeeping (docs/ARCHITECTURE.md section 5)
// without the memory: the memory model plays a rank's allocations and frees
// into it in the engine's order (the engine's own footprints, where a block
// has one), and the ledger keeps current and peak bytes per pool and
// component and per pool, as the allocator does, plus what the device pool
// held at its peak and during which phase.
//
// Every byte count is checked: a buffer whose size, or a total that, would
// not fit in int64 is not counted, and status() says which and where, so a
// replay never reports a peak that wrapped around.
#ifndef PLATEAU_PLAN_MEMORY_LEDGER_H_
#define PLATEAU_PLAN_MEMORY_LEDGER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/memory/footprint.h"
#include "proto/memory.pb.h"

namespace plateau::plan {

inline constexpr int kPools = 2;
inline constexpr int kComponents = 11;
static_assert(kPools == v1::MemoryPool_MAX &&
                  kComponents == v1::MemoryComponent_MAX,
              "one ledger slot per pool and component of proto/memory.proto");

class MemoryLedger : public engine::FootprintSink {
 public:
  Handle Allocate(v1::MemoryPool pool, v1::MemoryComponent component,
                  int64_t bytes);

  // engine::FootprintSink.
  Handle Allocate(const engine::BufferSpec& spec) override;
  // Frees a live allocation; 0 (the handle of nothing) is ignored.
  void Free(Handle* handle) override;
  void SetPhase(const std::string& phase) override { phase_ = phase; }

  int64_t peak_bytes(v1::MemoryPool pool, v1::MemoryComponent component) const;
  int64_t pool_peak_bytes(v1::MemoryPool pool) const;
  int64_t pool_current_bytes(v1::MemoryPool pool) const;
  // The device pool's bytes by component when it last reached its peak.
  int64_t device_bytes_at_peak(v1::MemoryComponent component) const;
  const std::string& device_peak_phase() const { return device_peak_phase_; }
  // OK, or INVALID_ARGUMENT for the first allocation whose bytes overflowed.
  const absl::Status& status() const { return status_; }

  // Forgets every allocation, peak and phase, as a new ledger would, but
  // keeps its storage: a prediction replays many ranks and routings into
  // one ledger, without growing it from nothing each time.
  void Reset();

 private:
  void Overflowed(v1::MemoryPool pool, v1::MemoryComponent component,
                  const std::string& what);

  struct Live {
    int pool = 0;
    int component = 0;
    int64_t bytes = 0;
  };

  std::array<std::array<int64_t, kComponents>, kPools> current_{};
  std::array<std::array<int64_t, kComponents>, kPools> peak_{};
  std::array<int64_t, kPools> pool_current_{};
  std::array<int64_t, kPools> pool_peak_{};
  std::array<int64_t, kComponents> device_at_peak_{};
  std::string phase_;
  std::string device_peak_phase_;
  absl::Status status_;
  // Indexed by handle - 1; freed entries have zero bytes.
  std::vector<Live> live_;
};

}  // namespace plateau::plan

#endif  // PLATEAU_PLAN_MEMORY_LEDGER_H_
