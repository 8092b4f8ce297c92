// Runs a grid of an emulated kernel: blocks in turn, each block's threads as
// Boost.Context fibers of the calling thread (see device.h).
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "boost/context/fiber.hpp"
#include "kernels/cuda/emulation/device.h"

namespace plateau::kernels::cuda::emulation {
namespace {

namespace context = boost::context;

constexpr size_t kFiberStackBytes = 256 * 1024;
constexpr int kWarpLanes = 32;

enum class Wait { kNone, kBlock, kWarp };

struct Fiber {
  context::fiber suspended;  // where it goes on when resumed
  ThreadState state;
  int lane = 0;
  int warp = 0;
  int shuffles = 0;  // done so far: which exchange buffer is next
  Wait waiting = Wait::kNone;
  bool finished = false;
};

// One fiber stack, mapped once per host thread and kept for later launches.
class Stack {
 public:
  Stack() {
    void* memory = mmap(nullptr, kFiberStackBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) {
      std::fprintf(stderr, "cuda emulation: cannot map a fiber stack\n");
      std::abort();
    }
    memory_ = memory;
  }
  ~Stack() { munmap(memory_, kFiberStackBytes); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  void* memory() const { return memory_; }

 private:
  void* memory_;
};

// Hands a fiber one of the thread's stacks (which outlive it).
class PooledStack {
 public:
  explicit PooledStack(Stack* stack) : stack_(stack) {}
  context::stack_context allocate() {
    context::stack_context stack;
    stack.size = kFiberStackBytes;
    stack.sp = static_cast<char*>(stack_->memory()) + kFiberStackBytes;
    return stack;
  }
  void deallocate(context::stack_context&) noexcept {}

 private:
  Stack* stack_;
};

// One warp: its lanes' shuffle exchange, two buffers used in turn (a lane
// writes one only after every lane has passed the barrier of the shuffle
// that used the other, so every read of it is done), and its barrier counts.
struct Warp {
  std::array<std::array<uint64_t, kWarpLanes>, 2> exchange;
  int live = 0;     // lanes not finished
  int waiting = 0;  // lanes waiting at a warp barrier
  int lanes = 0;    // lanes the block has in this warp
};

// The block that runs on this host thread.
struct BlockRun {
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int live = 0;              // fibers not finished
  int waiting_at_block = 0;  // fibers waiting at __syncthreads
  Fiber* current = nullptr;
  context::fiber scheduler;  // inside a fiber: the way back
};

thread_local BlockRun* running_block = nullptr;
thread_local std::vector<std::unique_ptr<Stack>> stacks;

BlockRun& Running() {
  if (running_block == nullptr || running_block->current == nullptr) {
    std::fprintf(stderr,
                 "cuda emulation: a device built-in was used outside of a "
                 "kernel\n");
    std::abort();
  }
  return *running_block;
}

void Suspend(Wait wait) {
  BlockRun& run = Running();
  Fiber& self = *run.current;
  self.waiting = wait;
  if (wait == Wait::kBlock) {
    ++run.waiting_at_block;
  } else {
    ++run.warps[self.warp].waiting;
  }
  run.scheduler = std::move(run.scheduler).resume();
}

// A fixed shuffle of 0..count-1 for the given seed (a 64-bit LCG driving
// Fisher-Yates), so that runs are reproducible.
template <typename Index>
std::vector<Index> ShuffledOrder(Index count, uint64_t seed) {
  std::vector<Index> order(static_cast<size_t>(count));
  for (Index i = 0; i < count; ++i) order[i] = i;
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (Index i = count - 1; i > 0; --i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const Index j =
        static_cast<Index>((state >> 33) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

[[noreturn]] void Deadlock(const uint3& block) {
  std::fprintf(stderr,
               "cuda emulation: block (%u, %u, %u) can never pass its "
               "barriers: some threads wait at __syncthreads while others "
               "wait for their warp\n",
               block.x, block.y, block.z);
  std::abort();
}

// Lets every waiting fiber of the block that can pass go on; false when
// none can. Finished threads do not hold a barrier up.
bool ReleaseBarriers(BlockRun& run) {
  if (run.live > 0 && run.waiting_at_block == run.live) {
    for (Fiber& fiber : run.fibers) fiber.waiting = Wait::kNone;
    run.waiting_at_block = 0;
    return true;
  }
  bool released = false;
  for (size_t w = 0; w < run.warps.size(); ++w) {
    Warp& warp = run.warps[w];
    if (warp.live == 0 || warp.waiting != warp.live) continue;
    const size_t first = w * kWarpLanes;
    for (int lane = 0; lane < warp.lanes; ++lane) {
      run.fibers[first + lane].waiting = Wait::kNone;
    }
    warp.waiting = 0;
    released = true;
  }
  return released;
}

void RunBlock(BlockRun& run, const uint3& block_index, dim3 grid, dim3 block,
              const std::vector<int>& order) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int warp_count = (threads + kWarpLanes - 1) / kWarpLanes;
  while (stacks.size() < static_cast<size_t>(threads)) {
    stacks.push_back(std::make_unique<Stack>());
  }
  run.fibers.clear();
  run.fibers.resize(threads);
  run.warps.assign(warp_count, Warp());
  run.live = threads;
  run.waiting_at_block = 0;
  for (int linear = 0; linear < threads; ++linear) {
    Fiber& fiber = run.fibers[linear];
    fiber.state.thread_index = {linear % block.x, (linear / block.x) % block.y,
                                linear / (block.x * block.y)};
    fiber.state.block_index = block_index;
    fiber.state.block_dim = block;
    fiber.state.grid_dim = grid;
    fiber.lane = linear % kWarpLanes;
    fiber.warp = linear / kWarpLanes;
    Warp& warp = run.warps[fiber.warp];
    ++warp.lanes;
    ++warp.live;
    fiber.suspended =
        context::fiber(std::allocator_arg, PooledStack(stacks[linear].get()),
                       [&run, &fiber](context::fiber&& scheduler) {
                         run.scheduler = std::move(scheduler);
                         (*run.body)();
                         fiber.finished = true;
                         --run.live;
                         --run.warps[fiber.warp].live;
                         return std::move(run.scheduler);
                       });
  }
  while (true) {
    for (int index : order) {
      Fiber& fiber = run.fibers[index];
      if (fiber.finished || fiber.waiting != Wait::kNone) continue;
      run.current = &fiber;
      fiber.suspended = std::move(fiber.suspended).resume();
      run.current = nullptr;
    }
    if (run.live == 0) return;
    if (!ReleaseBarriers(run)) Deadlock(block_index);
  }
}

bool ValidGeometry(dim3 grid, dim3 block) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  return threads >= 1 && threads <= 1024 && block.x <= 1024 &&
         block.y <= 1024 && block.z <= 64 && grid.x >= 1 &&
         grid.x <= 2147483647u && grid.y >= 1 && grid.y <= 65535 &&
         grid.z >= 1 && grid.z <= 65535;
}

}  // namespace

const ThreadState& CurrentThread() { return Running().current->state; }

void SyncThreads() { Suspend(Wait::kBlock); }

void SyncWarp() { Suspend(Wait::kWarp); }

uint64_t ShuffleBits(uint64_t bits, ShuffleMode mode, int argument, int width) {
  BlockRun& run = Running();
  Fiber& self = *run.current;
  Warp& warp = run.warps[self.warp];
  std::array<uint64_t, kWarpLanes>& exchange =
      warp.exchange[self.shuffles++ % 2];
  exchange[self.lane] = bits;
  SyncWarp();
  const int lane = self.lane;
  const int segment_start = lane / width * width;
  int source = lane;
  switch (mode) {
    case ShuffleMode::kIndex:
      source = segment_start + argument % width;
      break;
    case ShuffleMode::kUp:
      if (lane - argument >= segment_start) source = lane - argument;
      break;
    case ShuffleMode::kDown:
      if (lane + argument < segment_start + width) source = lane + argument;
      break;
    case ShuffleMode::kXor:
      if ((lane ^ argument) / width * width == segment_start) {
        source = lane ^ argument;
      }
      break;
  }
  return source < warp.lanes ? exchange[source] : bits;
}

cudaError_t RunGrid(dim3 grid, dim3 block, cudaStream_t,
                    const std::function<void()>& body) {
  if (!ValidGeometry(grid, block)) {
    SetLastError(cudaErrorInvalidConfiguration);
    return cudaErrorInvalidConfiguration;
  }
  if (running_block != nullptr) {
    std::fprintf(stderr, "cuda emulation: a kernel launched a kernel\n");
    std::abort();
  }
  DeviceAccessScope access;
  BlockRun run;
  run.body = &body;
  running_block = &run;
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  // Blocks in a shuffled order; each block's threads start in one of a few
  // shuffled orders (made once per launch: shuffling is not free).
  constexpr int kThreadOrders = 4;
  std::vector<std::vector<int>> thread_orders;
  for (int seed = 0; seed < kThreadOrders; ++seed) {
    thread_orders.push_back(ShuffledOrder(threads, seed));
  }
  for (int64_t linear : ShuffledOrder(blocks, blocks)) {
    const uint3 index = {
        static_cast<unsigned>(linear % grid.x),
        static_cast<unsigned>((linear / grid.x) % grid.y),
        static_cast<unsigned>(linear / (int64_t{grid.x} * grid.y))};
    RunBlock(run, index, grid, block, thread_orders[linear % kThreadOrders]);
  }
  running_block = nullptr;
  return cudaSuccess;
}

}  // namespace plateau::kernels::cuda::emulation
