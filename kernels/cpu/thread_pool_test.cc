#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace plateau::kernels::cpu {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnceInWholeGrains) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t count : {0, 1, 15, 16, 17, 1000}) {
      std::vector<int> visits(count, 0);
      pool.ParallelFor(count, 16, [&](int64_t begin, int64_t end) {
        EXPECT_EQ(begin % 16, 0);
        for (int64_t i = begin; i < end; ++i) ++visits[i];
      });
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(visits[i], 1) << i;
    }
  }
}

TEST(ThreadPoolTest, PartsAreStaticAndRunConcurrently) {
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  std::vector<int> seen(2, 0);
  for (int round = 0; round < 100; ++round) {
    arrived = 0;
    pool.RunParts(2, [&](int part) {
      ++seen[part];
      ++arrived;
      // Both parts must be in flight at once: part 0 runs on the caller.
      while (arrived.load() < 2) {
      }
    });
  }
  EXPECT_EQ(seen[0], 100);
  EXPECT_EQ(seen[1], 100);
}

// Two callers share one pool: each call must see only its own body and
// count, and every one of its indices must be written exactly once.
TEST(ThreadPoolTest, ConcurrentCallersEachGetEveryResult) {
  ThreadPool pool(3);
  constexpr int kRounds = 2000;
  std::atomic<int> failures{0};
  auto hammer = [&](int caller) {
    std::vector<int64_t> out;
    for (int round = 0; round < kRounds; ++round) {
      // Counts from one grain (no team) to many (every member busy).
      const int64_t count = 1 + (round * 37 + caller * 11) % 400;
      const int64_t tag = caller * 1000003 + round;
      out.assign(count, -1);
      pool.ParallelFor(count, 8, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if (out[i] != -1) ++failures;
          out[i] = tag * 1000 + i;
        }
      });
      for (int64_t i = 0; i < count; ++i) {
        if (out[i] != tag * 1000 + i) ++failures;
      }
    }
  };
  std::thread first(hammer, 1);
  std::thread second(hammer, 2);
  first.join();
  second.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPoolTest, MorePartsThanThreadsRunsEachPartOnce) {
  ThreadPool pool(3);
  for (int parts : {0, 1, 2, 3, 4, 7, 10}) {
    std::vector<std::atomic<int>> calls(parts);
    pool.RunParts(parts, [&](int part) { ++calls[part]; });
    for (int part = 0; part < parts; ++part) {
      EXPECT_EQ(calls[part].load(), 1) << parts << " parts, part " << part;
    }
  }
  pool.RunParts(-1, [](int) { ADD_FAILURE() << "negative parts ran a body"; });
}

// Calls further apart than the spin find the team asleep, and parts that
// outlast it find the caller asleep: both must still be woken, every time.
TEST(ThreadPoolTest, WakesATeamAndACallerThatHaveGoneToSleep) {
  const auto longer_than_the_spin =
      std::chrono::microseconds(4 * ThreadPool::kSpinMicroseconds);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 20; ++round) {
      std::this_thread::sleep_for(longer_than_the_spin);
      std::vector<std::atomic<int>> calls(threads);
      pool.RunParts(threads, [&](int part) {
        // The last part keeps the caller (part 0) waiting past its spin.
        if (part == threads - 1)
          std::this_thread::sleep_for(longer_than_the_spin);
        ++calls[part];
      });
      for (int part = 0; part < threads; ++part) {
        ASSERT_EQ(calls[part].load(), 1)
            << threads << " threads, round " << round << ", part " << part;
      }
    }
  }
}

TEST(ThreadPoolTest, NestedCallRunsInlineWithTheSameSplit) {
  ThreadPool pool(2);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> inner(2);
  pool.RunParts(2, [&](int part) {
    pool.ParallelFor(100, 10, [&](int64_t begin, int64_t end) {
      inner[part].emplace_back(begin, end);
    });
  });
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 50},
                                                             {50, 100}};
  EXPECT_EQ(inner[0], expected);
  EXPECT_EQ(inner[1], expected);
}

TEST(ThreadPoolTest, PartBeginSplitsEvenlyByGrain) {
  EXPECT_EQ(PartBegin(100, 10, 2, 0), 0);
  EXPECT_EQ(PartBegin(100, 10, 2, 1), 50);
  EXPECT_EQ(PartBegin(100, 10, 2, 2), 100);
  EXPECT_EQ(PartBegin(95, 10, 2, 1), 50);
  EXPECT_EQ(PartBegin(95, 10, 2, 2), 95);
}

// A product's pieces: by its multiply-adds, none narrower than the minimum
// width, a power of two. The thread count is no argument.
TEST(ThreadPoolTest, PiecesOfProductFollowItsSizeAlone) {
  EXPECT_EQ(PiecesOfProduct(0, 4096, 256), 1);
  EXPECT_EQ(PiecesOfProduct(kPieceMultiplyAdds, 4096, 256), 1);
  EXPECT_EQ(PiecesOfProduct(kPieceMultiplyAdds + 1, 4096, 256), 2);
  EXPECT_EQ(PiecesOfProduct(5 * kPieceMultiplyAdds, 4096, 256), 8);
  // 2048 x 768 x 256 along its 2048 rows: 8 pieces of 256.
  EXPECT_EQ(PiecesOfProduct(int64_t{2048} * 768 * 256, 2048, 256), 8);
  // 256 x 768 x 2048 along its 768 columns: 2 of 384, not 3 of 256.
  EXPECT_EQ(PiecesOfProduct(int64_t{256} * 768 * 2048, 768, 256), 2);
  EXPECT_EQ(PiecesOfProduct(int64_t{1} << 40, 511, 256), 1);
  EXPECT_EQ(PiecesOfProduct(int64_t{1} << 40, 511, 128), 2);
}

// Each thread gets the pieces whose work midpoint falls in its share.
TEST(ThreadPoolTest, OwnersByWorkGiveEachThreadAnEqualShare) {
  EXPECT_EQ(OwnersByWork({10, 10, 10, 10}, 40, 2),
            (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(OwnersByWork({30, 5, 5}, 40, 2), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(OwnersByWork({10, 10, 10}, 30, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(OwnersByWork({10, 10, 10}, 30, 1), (std::vector<int>{0, 0, 0}));
}

}  // namespace
}  // namespace plateau::kernels::cpu
