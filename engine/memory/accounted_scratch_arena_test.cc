#include "engine/memory/accounted_scratch_arena.h"

#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

class AccountedScratchArenaTest : public ::testing::Test {
 protected:
  AccountedScratchArenaTest() {
    AccountedAllocator::Options options;
    options.device_source = &source_;
    options.host_source = &source_;
    options.device_capacity_bytes = int64_t{8} << 20;
    allocator_ = std::make_unique<AccountedAllocator>(options);
  }

  int64_t OtherBytes() const {
    return allocator_->Usage(MemoryPool::kDevice, MemoryComponent::kOther)
        .current_bytes;
  }

  HostMemorySource source_;
  std::unique_ptr<AccountedAllocator> allocator_;
};

TEST_F(AccountedScratchArenaTest, GrowsInWholeMebibytesAndIsAccounted) {
  AccountedScratchArena arena(allocator_.get(), MemoryPool::kDevice,
                              MemoryComponent::kOther);
  absl::StatusOr<void*> first = arena.Reserve(100);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(arena.reserved_bytes(), int64_t{1} << 20);
  EXPECT_EQ(OtherBytes(), int64_t{1} << 20);
  // Smaller asks reuse the block.
  absl::StatusOr<void*> again = arena.Reserve(1 << 20);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  ASSERT_TRUE(arena.Reserve((3 << 20) + 1).ok());
  EXPECT_EQ(OtherBytes(), int64_t{4} << 20);
}

TEST_F(AccountedScratchArenaTest, FreesTheSmallerBlockBeforeGrowing) {
  AccountedScratchArena arena(allocator_.get(), MemoryPool::kDevice,
                              MemoryComponent::kOther);
  ASSERT_TRUE(arena.Reserve(int64_t{5} << 20).ok());
  // 5 + 7 MiB would not fit the 8 MiB pool; 7 alone does.
  ASSERT_TRUE(arena.Reserve(int64_t{7} << 20).ok());
  EXPECT_EQ(OtherBytes(), int64_t{7} << 20);
}

TEST_F(AccountedScratchArenaTest, SaysWhatDidNotFit) {
  AccountedScratchArena arena(allocator_.get(), MemoryPool::kDevice,
                              MemoryComponent::kOther);
  const absl::StatusOr<void*> reserved = arena.Reserve(int64_t{9} << 20);
  EXPECT_EQ(reserved.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(reserved.status().message().find("kernel scratch"),
            std::string::npos)
      << reserved.status();
  EXPECT_EQ(OtherBytes(), 0);
}

}  // namespace
}  // namespace plateau::engine
