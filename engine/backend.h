// The compute backend a rank runs on: its kernels and where its device and
// host memory come from. The CPU backend's "device" is host memory with a
// configured capacity, so running out of it fails as a GPU would; the CUDA
// backend (cuda_backend.h) is assembled from the same parts.
#ifndef PLATEAU_ENGINE_BACKEND_H_
#define PLATEAU_ENGINE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/memory/accounted_scratch_arena.h"
#include "engine/memory/memory_source.h"
#include "kernels/ops.h"
#include "kernels/scratch_arena.h"

namespace plateau::engine {

class Backend {
 public:
  // Makes the kernels, once the allocator and their scratch arena (device
  // pool, component `other`) exist.
  using OpsFactory =
      std::function<absl::StatusOr<std::unique_ptr<kernels::Ops>>(
          kernels::ScratchArena& scratch)>;

  // Kernels on `threads` threads; device pool capped at
  // device_capacity_bytes.
  static std::unique_ptr<Backend> CreateCpu(int threads,
                                            int64_t device_capacity_bytes);

  // A backend of these memory sources, device pool capacity and kernels
  // (`kernels` names them, see kernels()); make_ops's error if it fails.
  static absl::StatusOr<std::unique_ptr<Backend>> Assemble(
      std::string description, std::string kernels,
      std::unique_ptr<MemorySource> device_memory,
      std::unique_ptr<MemorySource> host_memory, int64_t device_capacity_bytes,
      const OpsFactory& make_ops);

  kernels::Ops& ops() { return *ops_; }
  AccountedAllocator& allocator() { return *allocator_; }
  const std::string& description() const { return description_; }
  // What decides the bits of its results, for a checkpoint to record: on
  // the CPU the SIMD level, OpenBLAS's core and oneDNN's ISA ("cpu: simd
  // avx2, openblas Haswell, onednn avx2"), on CUDA the device's model and
  // architecture. The thread count and the memory do not change results.
  // A run resumes bitwise only where it is the same.
  const std::string& kernels() const { return kernels_; }

 private:
  Backend() = default;

  std::string description_;
  std::string kernels_;
  std::unique_ptr<MemorySource> device_memory_;
  std::unique_ptr<MemorySource> host_memory_;
  // Destroyed in reverse: the kernels first, then their scratch, then the
  // allocator (while its sources still exist).
  std::unique_ptr<AccountedAllocator> allocator_;
  std::unique_ptr<AccountedScratchArena> scratch_;
  std::unique_ptr<kernels::Ops> ops_;
};

// Makes a rank's backend (TrainerOptions).
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>()>;

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_BACKEND_H_
