// A fixed team of threads for data-parallel loops. Work is split statically
// (part i always gets the same range), so any per-part partial results are
// combined in the same order on every run: results never depend on timing.
// The calling thread runs part 0.
//
// Hand-off: a waiting thread (a member waiting for work, the caller waiting
// for the team) spins for up to kSpinMicroseconds before it sleeps. A step
// runs thousands of short loops back to back, and waking a sleeping thread
// costs more than most of them (20 us a call on a 2-core VM, where a 65,536
// element conversion takes 4 us on one thread: tests/bench/thread_pool_bench);
// an idle pool gives its cores back within the spin.
//
// Thread safety: RunParts and ParallelFor may be called from several threads
// at once. Whole calls are serialized (one call has the team at a time; the
// others wait for it), so concurrent callers get exactly the results they
// would get alone, without extra parallelism. A call made from inside a body
// of the same pool runs all its parts on the calling thread, in order, with
// the same split (so it neither deadlocks nor changes the results).
#ifndef PLATEAU_KERNELS_CPU_THREAD_POOL_H_
#define PLATEAU_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace plateau::kernels::cpu {

class ThreadPool {
 public:
  static constexpr int kSpinMicroseconds = 50;

  // threads < 1 is taken as 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls body(part) for part in [0, parts) across the team and returns when
  // every call has returned. Team member t runs parts t, t + threads(),
  // t + 2 * threads(), ... in that order (so parts > threads() is allowed,
  // if rarely useful); parts <= 0 calls nothing.
  void RunParts(int parts, const std::function<void(int part)>& body);

  // Splits [0, count) into min(threads, ceil(count / grain)) contiguous
  // ranges of whole grains and calls body(begin, end) once per range.
  void ParallelFor(int64_t count, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)>& body);

 private:
  void WorkerLoop(int member) ABSL_LOCKS_EXCLUDED(mutex_);
  // Runs the parts of `member` (see RunParts), marked as inside this pool.
  void RunMemberParts(int member, int parts,
                      const std::function<void(int)>& body);
  // Returns once done() holds: spins, then sleeps on `wake` (whoever makes
  // done() true calls Wake(wake) after).
  void WaitUntil(const std::function<bool()>& done, absl::CondVar& wake)
      ABSL_LOCKS_EXCLUDED(mutex_);
  void Wake(absl::CondVar& wake) ABSL_LOCKS_EXCLUDED(mutex_);

  const int threads_;
  std::vector<std::thread> workers_;
  // Held for the whole of a RunParts that uses the team: one call at a time
  // sets the call's state and waits for every member to be done with it.
  absl::Mutex run_mutex_ ABSL_ACQUIRED_BEFORE(mutex_);
  // Only for sleeping: the state below is atomic, so spinning threads read
  // it without the lock.
  absl::Mutex mutex_;
  absl::CondVar work_ready_;
  absl::CondVar work_done_;
  // The call's state, written by its caller before it publishes
  // generation_ and read by the members after they see it. Every member
  // counts pending_ down once per call, whether it has parts or not, so no
  // member still reads a call's state when the next call writes it.
  std::atomic<const std::function<void(int)>*> body_{nullptr};
  std::atomic<int> parts_{0};
  std::atomic<int> pending_{0};
  std::atomic<int64_t> generation_{0};
  std::atomic<bool> stopping_{false};
};

// The begin of part `part` when [0, count) is split into `parts` ranges of
// whole grains.
int64_t PartBegin(int64_t count, int64_t grain, int parts, int part);

// The number of pieces a matrix product of `work` multiply-adds is cut into
// along an output dimension of `extent` rows or columns: the least power of
// two that leaves each at most kPieceMultiplyAdds (2, 4 or 8 threads share
// a power of two evenly), unless that would make them narrower than
// `min_piece_extent` (the library's calls lose speed below some width, as
// each repacks the other operand); at least 1.
// It depends on the product alone, never on the thread count: the shape of
// every library call, and with it the summation order, is the same in any
// pool (OpenBLAS's Haswell kernels, for one, sum a row of c differently by
// where it falls among a call's rows).
//
// 2^26 multiply-adds are 0.65-1.25 ms of one core's float32 sgemm
// (OpenBLAS's AVX-512 or AVX2 kernels) and about 0.3 ms of its bf16
// products. Pieces of 2^22 cost the example's products 0-8% in float32 and
// 3-13% in bf16 on two threads (docs/BENCHMARKS.md, "The same bits at any
// thread count"). A product of fewer
// pieces than the pool has threads leaves some idle (the example's at 8
// threads); a larger model's products are many times 2^26.
inline constexpr int64_t kPieceMultiplyAdds = int64_t{1} << 26;
int PiecesOfProduct(int64_t work, int64_t extent, int64_t min_piece_extent);

// Pieces dealt to `threads` threads by work: thread t runs the pieces whose
// cumulative work midpoint falls in its share [t, t + 1) * total_work /
// threads, so each thread gets an equal share. Returns each piece's thread.
std::vector<int> OwnersByWork(const std::vector<int64_t>& piece_work,
                              int64_t total_work, int threads);

// Calls run(i) for each piece i of `piece_work` (its work in any unit), the
// pieces dealt by OwnersByWork to at most as many of the pool's threads as
// there are pieces; one piece runs on the calling thread.
void RunPiecesByWork(ThreadPool& pool, const std::vector<int64_t>& piece_work,
                     const std::function<void(size_t piece)>& run);

}  // namespace plateau::kernels::cpu

#endif  // PLATEAU_KERNELS_CPU_THREAD_POOL_H_
