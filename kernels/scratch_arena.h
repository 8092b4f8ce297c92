// Device memory for a backend's multi-pass kernels (the CUDA backend's
// partial sums, sort buffers, pointer arrays), given by the engine so that it
// is accounted as every other device byte is (engine/memory's
// AccountedScratchArena).
#ifndef PLATEAU_KERNELS_SCRATCH_ARENA_H_
#define PLATEAU_KERNELS_SCRATCH_ARENA_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace plateau::kernels {

class ScratchArena {
 public:
  virtual ~ScratchArena() = default;
  // At least `bytes` of device memory, valid until the next call, which may
  // free it: work already queued that uses it stays ordered before any reuse
  // of the memory on the same stream. RESOURCE_EXHAUSTED when it cannot be
  // had.
  virtual absl::StatusOr<void*> Reserve(int64_t bytes) = 0;
};

}  // namespace plateau::kernels

#endif  // PLATEAU_KERNELS_SCRATCH_ARENA_H_
