#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <cassert>

namespace plateau::kernels::cpu {

ThreadPool::ThreadPool(int threads) : threads_(std::max(threads, 1)) {
  for (int part = 1; part < threads_; ++part) {
    workers_.emplace_back([this, part] { WorkerLoop(part); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  work_ready_.SignalAll();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::WorkerLoop(int part) {
  int64_t seen_generation = 0;
  mutex_.Lock();
  while (true) {
    while (!stopping_ && generation_ == seen_generation) {
      work_ready_.Wait(&mutex_);
    }
    if (stopping_) break;
    seen_generation = generation_;
    if (part >= parts_) continue;
    const std::function<void(int)>* body = body_;
    mutex_.Unlock();
    (*body)(part);
    mutex_.Lock();
    if (--pending_ == 0) work_done_.Signal();
  }
  mutex_.Unlock();
}

void ThreadPool::RunParts(int parts, const std::function<void(int)>& body) {
  assert(parts <= threads_);
  if (parts <= 1) {
    if (parts == 1) body(0);
    return;
  }
  {
    absl::MutexLock lock(&mutex_);
    body_ = &body;
    parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  work_ready_.SignalAll();
  body(0);
  absl::MutexLock lock(&mutex_);
  while (pending_ > 0) work_done_.Wait(&mutex_);
  body_ = nullptr;
}

int64_t PartBegin(int64_t count, int64_t grain, int parts, int part) {
  const int64_t grains = (count + grain - 1) / grain;
  return std::min(count, grains * part / parts * grain);
}

void ThreadPool::ParallelFor(
    int64_t count, int64_t grain,
    const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t grains = (count + grain - 1) / grain;
  const int parts = static_cast<int>(std::min<int64_t>(threads_, grains));
  RunParts(parts, [&](int part) {
    const int64_t begin = PartBegin(count, grain, parts, part);
    const int64_t end = PartBegin(count, grain, parts, part + 1);
    if (begin < end) body(begin, end);
  });
}

}  // namespace plateau::kernels::cpu
