#include "engine/memory/tensor.h"

#include <utility>

#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

class TensorTest : public ::testing::Test {
 protected:
  TensorTest() : allocator_(Options()) {}
  AccountedAllocator::Options Options() {
    AccountedAllocator::Options options;
    options.device_source = &source_;
    options.host_source = &source_;
    return options;
  }
  HostMemorySource source_;
  AccountedAllocator allocator_;
};

TEST_F(TensorTest, ChargesItsBytesToItsComponentUntilReset) {
  auto tensor = Tensor::Create(allocator_, MemoryPool::kDevice,
                               MemoryComponent::kAttention, {8, 3, 5});
  ASSERT_TRUE(tensor.ok());
  EXPECT_EQ(tensor->elements(), 120);
  EXPECT_EQ(tensor->bytes(), 480);
  EXPECT_EQ(tensor->dim(1), 3);
  EXPECT_EQ(ShapeString(tensor->shape()), "[8, 3, 5]");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor->f32()) % 64, 0u);
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kAttention)
                .current_bytes,
            480);
  Tensor moved = std::move(tensor).value();
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kAttention)
                .current_bytes,
            480);
  moved.Reset();
  EXPECT_TRUE(moved.empty());
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kAttention)
                .current_bytes,
            0);
}

TEST_F(TensorTest, IntTensorsAreFourBytesPerElement) {
  auto tensor = Tensor::Create(allocator_, MemoryPool::kHost,
                               MemoryComponent::kDispatch, {10}, DType::kInt32);
  ASSERT_TRUE(tensor.ok());
  EXPECT_EQ(tensor->bytes(), 40);
  EXPECT_EQ(tensor->dtype(), DType::kInt32);
}

TEST_F(TensorTest, RejectsNegativeExtents) {
  auto tensor = Tensor::Create(allocator_, MemoryPool::kHost,
                               MemoryComponent::kOther, {4, -1});
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::engine
