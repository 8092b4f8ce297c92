// A dense, row-major tensor whose bytes are an Allocation of the accounted
// allocator, so its lifetime is its accounting: destroying (or Reset-ing) a
// tensor returns its bytes to its (pool, component). Contents start
// uninitialised. On the CUDA backend device tensors hold device pointers:
// only kernels (kernels/ops.h) may read them.
#ifndef PLATEAU_ENGINE_MEMORY_TENSOR_H_
#define PLATEAU_ENGINE_MEMORY_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/memory/dtype.h"
#include "engine/memory/footprint.h"

namespace plateau::engine {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;

  // RESOURCE_EXHAUSTED when the pool cannot hold it (see AccountedAllocator).
  static absl::StatusOr<Tensor> Create(AccountedAllocator& allocator,
                                       MemoryPool pool,
                                       MemoryComponent component,
                                       std::vector<int64_t> shape,
                                       DType dtype = DType::kFloat32);
  // The buffer a block's footprint names (engine/memory/footprint.h).
  static absl::StatusOr<Tensor> Create(AccountedAllocator& allocator,
                                       const BufferSpec& spec);

  // The bytes, whatever the dtype (to copy or send them).
  void* data() { return allocation_.data(); }
  const void* data() const { return allocation_.data(); }
  float* f32() { return static_cast<float*>(allocation_.data()); }
  const float* f32() const {
    return static_cast<const float*>(allocation_.data());
  }
  int32_t* i32() { return static_cast<int32_t*>(allocation_.data()); }
  const int32_t* i32() const {
    return static_cast<const int32_t*>(allocation_.data());
  }
  // bfloat16 values as their bits (kernels/tiered_update.h converts them).
  uint16_t* bf16() { return static_cast<uint16_t*>(allocation_.data()); }
  const uint16_t* bf16() const {
    return static_cast<const uint16_t*>(allocation_.data());
  }

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int axis) const { return shape_[axis]; }
  int64_t elements() const { return elements_; }
  int64_t bytes() const { return allocation_.bytes(); }
  DType dtype() const { return dtype_; }
  MemoryPool pool() const { return allocation_.pool(); }
  MemoryComponent component() const { return allocation_.component(); }
  bool empty() const { return allocation_.empty(); }

  // Frees the bytes now.
  void Reset();

 private:
  Allocation allocation_;
  std::vector<int64_t> shape_;
  int64_t elements_ = 0;
  DType dtype_ = DType::kFloat32;
};

// "[2048, 256]".
std::string ShapeString(const std::vector<int64_t>& shape);

// The product of the extents (1 for a scalar's empty shape).
int64_t ShapeElements(const std::vector<int64_t>& shape);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_TENSOR_H_
