#include "engine/memory/memory_component.h"

#include <cctype>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

// The metrics' label value and the API's enum name agree for every
// component, and the API has no component the engine lacks.
TEST(MemoryComponentTest, TheApiEnumIsTheEngineEnumByName) {
  std::set<int> mapped;
  for (int c = 0; c < kMemoryComponentCount; ++c) {
    const auto component = static_cast<MemoryComponent>(c);
    std::string expected =
        std::string("MEMORY_COMPONENT_") + MemoryComponentName(component);
    for (char& letter : expected) {
      letter = static_cast<char>(std::toupper(letter));
    }
    const v1::MemoryComponent proto = MemoryComponentProto(component);
    EXPECT_EQ(v1::MemoryComponent_Name(proto), expected);
    mapped.insert(proto);
  }
  EXPECT_EQ(mapped.size(), static_cast<size_t>(kMemoryComponentCount));
  EXPECT_EQ(v1::MemoryComponent_MAX, kMemoryComponentCount);
}

TEST(MemoryComponentTest, PoolsByName) {
  EXPECT_EQ(v1::MemoryPool_Name(MemoryPoolProto(MemoryPool::kDevice)),
            "MEMORY_POOL_DEVICE");
  EXPECT_EQ(v1::MemoryPool_Name(MemoryPoolProto(MemoryPool::kHost)),
            "MEMORY_POOL_HOST");
}

}  // namespace
}  // namespace plateau::engine
