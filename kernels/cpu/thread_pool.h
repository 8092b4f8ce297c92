// A fixed team of threads for data-parallel loops. Work is split statically
// (part i always gets the same range), so any per-part partial results are
// combined in the same order on every run: results never depend on timing.
// The calling thread runs part 0. Not reentrant: ParallelFor must not be
// called from inside a ParallelFor body.
#ifndef PLATEAU_KERNELS_CPU_THREAD_POOL_H_
#define PLATEAU_KERNELS_CPU_THREAD_POOL_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace plateau::kernels::cpu {

class ThreadPool {
 public:
  // REQUIRES: threads >= 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls body(part, parts) for part in [0, parts) across the team and
  // returns when every call has returned. parts <= threads().
  void RunParts(int parts, const std::function<void(int part)>& body);

  // Splits [0, count) into min(threads, ceil(count / grain)) contiguous
  // ranges of whole grains and calls body(begin, end) once per range.
  void ParallelFor(int64_t count, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)>& body);

 private:
  void WorkerLoop(int part);

  const int threads_;
  std::vector<std::thread> workers_;
  absl::Mutex mutex_;
  absl::CondVar work_ready_;
  absl::CondVar work_done_;
  const std::function<void(int)>* body_ ABSL_GUARDED_BY(mutex_) = nullptr;
  int parts_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mutex_) = 0;
  int pending_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

// The begin of part `part` when [0, count) is split into `parts` ranges of
// whole grains.
int64_t PartBegin(int64_t count, int64_t grain, int parts, int part);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_THREAD_POOL_H_
