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

constexpr size_t kFiberStackBytes = 256 * 1024;
constexpr int kWarpLanes = 32;

enum class Wait { kNone, kBlock, kWarp };

namespace context = boost::context;

struct Fiber {
  context::fiber suspended;  // where it goes on when resumed
  ThreadState state;
  int lane = 0;
  int warp = 0;
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

// A warp's shuffle exchange, two buffers used in turn: a lane writes one
// only after every lane has passed the barrier of the shuffle that used the
// other, so every read of it is done.
struct WarpExchange {
  std::array<std::array<uint64_t, kWarpLanes>, 2> values;
};

// The block that runs on this host thread.
struct BlockRun {
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<int> shuffles;  // per fiber: how many it has done
  Fiber* current = nullptr;
  context::fiber scheduler;  // inside a fiber: the way back
  std::vector<WarpExchange> exchange;
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
  run.current->waiting = wait;
  run.scheduler = std::move(run.scheduler).resume();
}

// A fixed shuffle of 0..count-1 for the given seed (a 64-bit LCG driving
// Fisher-Yates), so that runs are reproducible.
std::vector<int64_t> ShuffledOrder(int64_t count, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[i] = i;
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = count - 1; i > 0; --i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t j = static_cast<int64_t>((state >> 33) % (i + 1));
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
// none can.
bool ReleaseBarriers(BlockRun& run, int warps) {
  int live = 0;
  int at_block = 0;
  std::vector<int> warp_live(warps, 0), warp_waiting(warps, 0);
  for (const Fiber& fiber : run.fibers) {
    if (fiber.finished) continue;
    ++live;
    ++warp_live[fiber.warp];
    if (fiber.waiting == Wait::kBlock) ++at_block;
    if (fiber.waiting == Wait::kWarp) ++warp_waiting[fiber.warp];
  }
  if (live > 0 && at_block == live) {
    for (Fiber& fiber : run.fibers) fiber.waiting = Wait::kNone;
    return true;
  }
  bool released = false;
  for (int warp = 0; warp < warps; ++warp) {
    if (warp_live[warp] == 0 || warp_waiting[warp] != warp_live[warp]) {
      continue;
    }
    for (Fiber& fiber : run.fibers) {
      if (fiber.warp == warp) fiber.waiting = Wait::kNone;
    }
    released = true;
  }
  return released;
}

void RunBlock(BlockRun& run, const uint3& block_index, dim3 grid, dim3 block,
              uint64_t seed) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int warps = (threads + kWarpLanes - 1) / kWarpLanes;
  while (stacks.size() < static_cast<size_t>(threads)) {
    stacks.push_back(std::make_unique<Stack>());
  }
  run.fibers.clear();
  run.fibers.resize(threads);
  run.shuffles.assign(threads, 0);
  run.exchange.assign(warps, {});
  for (int linear = 0; linear < threads; ++linear) {
    Fiber& fiber = run.fibers[linear];
    fiber.state.thread_index = {linear % block.x, (linear / block.x) % block.y,
                                linear / (block.x * block.y)};
    fiber.state.block_index = block_index;
    fiber.state.block_dim = block;
    fiber.state.grid_dim = grid;
    fiber.lane = linear % kWarpLanes;
    fiber.warp = linear / kWarpLanes;
    fiber.suspended =
        context::fiber(std::allocator_arg, PooledStack(stacks[linear].get()),
                       [&run, &fiber](context::fiber&& scheduler) {
                         run.scheduler = std::move(scheduler);
                         (*run.body)();
                         fiber.finished = true;
                         return std::move(run.scheduler);
                       });
  }
  const std::vector<int64_t> order = ShuffledOrder(threads, seed);
  while (true) {
    bool any_live = false;
    for (int64_t index : order) {
      Fiber& fiber = run.fibers[index];
      if (fiber.finished || fiber.waiting != Wait::kNone) continue;
      run.current = &fiber;
      fiber.suspended = std::move(fiber.suspended).resume();
      run.current = nullptr;
    }
    for (const Fiber& fiber : run.fibers) any_live |= !fiber.finished;
    if (!any_live) return;
    if (!ReleaseBarriers(run, warps)) Deadlock(block_index);
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
  const Fiber* self = run.current;
  const int linear = static_cast<int>(self - run.fibers.data());
  std::array<uint64_t, kWarpLanes>& exchange =
      run.exchange[self->warp].values[run.shuffles[linear]++ % 2];
  exchange[self->lane] = bits;
  SyncWarp();
  const int lane = self->lane;
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
  const int lanes_in_warp =
      std::min<int>(kWarpLanes, static_cast<int>(run.fibers.size()) -
                                    self->warp * kWarpLanes);
  return source < lanes_in_warp ? exchange[source] : bits;
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
  const std::vector<int64_t> order = ShuffledOrder(blocks, blocks);
  for (int64_t linear : order) {
    const uint3 index = {
        static_cast<unsigned>(linear % grid.x),
        static_cast<unsigned>((linear / grid.x) % grid.y),
        static_cast<unsigned>(linear / (int64_t{grid.x} * grid.y))};
    RunBlock(run, index, grid, block, static_cast<uint64_t>(linear));
  }
  running_block = nullptr;
  return cudaSuccess;
}

}  // namespace plateau::kernels::cuda::emulation
