// A background thread that moves bytes between a backend's device memory and
// the host while the caller computes: the CPU form of a copy stream. Copies
// run one at a time in submission order, so waiting for one copy means every
// earlier one is done too. The buffers of a copy must stay alive, and
// unwritten by anyone else, until it has been waited for.
//
// The copies are the backend's Ops copies called from the engine's thread
// while other Ops calls run; CpuOps allows that (a CUDA backend gives the
// engine its own stream).
#ifndef PLATEAU_ENGINE_MEMORY_COPY_ENGINE_H_
#define PLATEAU_ENGINE_MEMORY_COPY_ENGINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernels/ops.h"

namespace plateau::engine {

class CopyEngine {
 public:
  // Identifies a submitted copy; 0 is "nothing to wait for".
  using Ticket = int64_t;

  explicit CopyEngine(kernels::Ops* ops);
  // Finishes every submitted copy first.
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  Ticket ToHost(int64_t bytes, const void* device, void* host);
  Ticket FromHost(int64_t bytes, const void* host, void* device);
  // Copies `count` bf16 values from the device into `bits` (host), then
  // widens them into host float32 `host`, on the engine's thread: `bits`
  // is free again for the next copy submitted.
  Ticket ToHostWidened(int64_t count, const uint16_t* device, uint16_t* bits,
                       float* host);
  // Returns once copy `ticket` and every copy submitted before it are done.
  void Wait(Ticket ticket) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  Ticket Submit(std::function<void()> copy) ABSL_LOCKS_EXCLUDED(mutex_);
  void Loop() ABSL_LOCKS_EXCLUDED(mutex_);

  kernels::Ops* ops_;
  absl::Mutex mutex_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mutex_);
  Ticket submitted_ ABSL_GUARDED_BY(mutex_) = 0;
  Ticket completed_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;  // Started last, once the state above exists.
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_COPY_ENGINE_H_
