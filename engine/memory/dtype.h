// The element types of the engine's tensors and their sizes: the one place a
// size in bytes per element is said, for the engine and the memory planner.
#ifndef PLATEAU_ENGINE_MEMORY_DTYPE_H_
#define PLATEAU_ENGINE_MEMORY_DTYPE_H_

#include <cstdint>

namespace plateau::engine {

enum class DType { kFloat32, kInt32, kBfloat16 };

inline constexpr int64_t kFloatBytes = sizeof(float);
inline constexpr int64_t kBfloat16Bytes = 2;

inline constexpr int64_t DTypeBytes(DType dtype) {
  return dtype == DType::kBfloat16 ? kBfloat16Bytes : kFloatBytes;
}

// For messages: "float32", "int32" or "bf16".
inline constexpr const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt32:
      return "int32";
    case DType::kBfloat16:
      return "bf16";
  }
  return "unknown";
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_DTYPE_H_
