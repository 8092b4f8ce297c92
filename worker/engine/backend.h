// The compute backend a rank runs on: its kernels and where its device and
// host memory come from. The CPU backend's "device" is host memory with a
// configured capacity, so running out of it fails as a GPU would.
#ifndef PLATEAU_WORKER_ENGINE_BACKEND_H_
#define PLATEAU_WORKER_ENGINE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/ops.h"
#include "worker/engine/memory/accounted_allocator.h"
#include "worker/engine/memory/memory_source.h"

namespace plateau::engine {

class Backend {
 public:
  // Kernels on `threads` threads; device pool capped at
  // device_capacity_bytes.
  static std::unique_ptr<Backend> CreateCpu(int threads,
                                            int64_t device_capacity_bytes);

  kernels::Ops& ops() { return *ops_; }
  AccountedAllocator& allocator() { return *allocator_; }
  const std::string& description() const { return description_; }

 private:
  Backend() = default;

  std::string description_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<MemorySource> device_memory_;
  std::unique_ptr<MemorySource> host_memory_;
  // Declared last: destroyed first, while its sources still exist.
  std::unique_ptr<AccountedAllocator> allocator_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_BACKEND_H_
