#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace plateau::kernels::cpu {
namespace {

// The pool whose body this thread is running, if any: a RunParts of that pool
// from inside the body must not wait for the team it is part of.
thread_local const ThreadPool* pool_running_here = nullptr;

// One step of a spin: tells the core that this thread is only waiting.
void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(std::max(threads, 1)) {
  for (int member = 1; member < threads_; ++member) {
    workers_.emplace_back([this, member] { WorkerLoop(member); });
  }
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  Wake(work_ready_);
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::WaitUntil(const std::function<bool()>& done,
                           absl::CondVar& wake) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(kSpinMicroseconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      absl::MutexLock lock(&mutex_);
      while (!done()) wake.Wait(&mutex_);
      return;
    }
    for (int i = 0; i < 64 && !done(); ++i) CpuRelax();
  }
}

void ThreadPool::Wake(absl::CondVar& wake) {
  // A sleeper checks done() under the lock before it waits, so taking the
  // lock after the change and signalling cannot miss one.
  { absl::MutexLock lock(&mutex_); }
  wake.SignalAll();
}

void ThreadPool::RunMemberParts(int member, int parts,
                                const std::function<void(int)>& body) {
  const ThreadPool* const outer = pool_running_here;
  pool_running_here = this;
  for (int part = member; part < parts; part += threads_) body(part);
  pool_running_here = outer;
}

void ThreadPool::WorkerLoop(int member) {
  int64_t seen_generation = 0;
  while (true) {
    WaitUntil(
        [&] {
          return generation_.load(std::memory_order_acquire) != seen_generation;
        },
        work_ready_);
    seen_generation = generation_.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_relaxed)) return;
    const int parts = parts_.load(std::memory_order_relaxed);
    if (member < parts) {
      RunMemberParts(member, parts, *body_.load(std::memory_order_relaxed));
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      Wake(work_done_);
    }
  }
}

void ThreadPool::RunParts(int parts, const std::function<void(int)>& body) {
  if (parts <= 0) return;
  if (parts == 1 || threads_ == 1 || pool_running_here == this) {
    // No team needed, or the team is busy with the call whose body made this
    // one: every part on this thread, in order.
    for (int part = 0; part < parts; ++part) body(part);
    return;
  }
  absl::MutexLock run_lock(&run_mutex_);
  body_.store(&body, std::memory_order_relaxed);
  parts_.store(parts, std::memory_order_relaxed);
  pending_.store(threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  Wake(work_ready_);
  RunMemberParts(0, parts, body);
  WaitUntil([&] { return pending_.load(std::memory_order_acquire) == 0; },
            work_done_);
}

int PiecesOfProduct(int64_t work, int64_t extent, int64_t min_piece_extent) {
  min_piece_extent = std::max<int64_t>(min_piece_extent, 1);
  int pieces = 1;
  while (int64_t{pieces} * 2 * min_piece_extent <= extent &&
         int64_t{pieces} * kPieceMultiplyAdds < work) {
    pieces *= 2;
  }
  return pieces;
}

std::vector<int> OwnersByWork(const std::vector<int64_t>& piece_work,
                              int64_t total_work, int threads) {
  std::vector<int> owner(piece_work.size());
  int64_t done = 0;
  for (size_t i = 0; i < piece_work.size(); ++i) {
    const int64_t midpoint = done + piece_work[i] / 2;
    owner[i] = static_cast<int>(std::min<int64_t>(
        threads - 1, midpoint * threads / std::max<int64_t>(total_work, 1)));
    done += piece_work[i];
  }
  return owner;
}

void RunPiecesByWork(ThreadPool& pool, const std::vector<int64_t>& piece_work,
                     const std::function<void(size_t)>& run) {
  if (piece_work.size() <= 1) {
    if (!piece_work.empty()) run(0);
    return;
  }
  const int threads = static_cast<int>(
      std::min<size_t>(static_cast<size_t>(pool.threads()), piece_work.size()));
  int64_t total_work = 0;
  for (int64_t work : piece_work) total_work += work;
  const std::vector<int> owner = OwnersByWork(piece_work, total_work, threads);
  pool.RunParts(threads, [&](int part) {
    for (size_t i = 0; i < piece_work.size(); ++i) {
      if (owner[i] == part) run(i);
    }
  });
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
