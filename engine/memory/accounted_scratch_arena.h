// A backend's kernel scratch (kernels/scratch_arena.h) as one allocation of
// the accounted allocator, charged to a (pool, component), so that its bytes
// show in the peaks like any tensor's. It only grows: to the size asked,
// rounded up to a MiB, freeing the smaller block first. Not thread-safe (the
// backend's kernels take one call at a time).
#ifndef PLATEAU_ENGINE_MEMORY_ACCOUNTED_SCRATCH_ARENA_H_
#define PLATEAU_ENGINE_MEMORY_ACCOUNTED_SCRATCH_ARENA_H_

#include <cstdint>

#include "engine/memory/accounted_allocator.h"
#include "kernels/scratch_arena.h"

namespace plateau::engine {

class AccountedScratchArena final : public kernels::ScratchArena {
 public:
  // `allocator` must outlive the arena.
  AccountedScratchArena(AccountedAllocator* allocator, MemoryPool pool,
                        MemoryComponent component);

  absl::StatusOr<void*> Reserve(int64_t bytes) override;
  int64_t reserved_bytes() const { return block_.bytes(); }

 private:
  AccountedAllocator* allocator_;
  MemoryPool pool_;
  MemoryComponent component_;
  Allocation block_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_ACCOUNTED_SCRATCH_ARENA_H_
