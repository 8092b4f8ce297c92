#include "kernels/cpu/thread_pool.h"

#include <atomic>
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

TEST(ThreadPoolTest, PartBeginSplitsEvenlyByGrain) {
  EXPECT_EQ(PartBegin(100, 10, 2, 0), 0);
  EXPECT_EQ(PartBegin(100, 10, 2, 1), 50);
  EXPECT_EQ(PartBegin(100, 10, 2, 2), 100);
  EXPECT_EQ(PartBegin(95, 10, 2, 1), 50);
  EXPECT_EQ(PartBegin(95, 10, 2, 2), 95);
}

}  // namespace
}  // namespace plateau::kernels::cpu
