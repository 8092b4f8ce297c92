#include "engine/memory/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace plateau::engine {

absl::StatusOr<Tensor> Tensor::Create(AccountedAllocator& allocator,
                                      MemoryPool pool,
                                      MemoryComponent component,
                                      std::vector<int64_t> shape, DType dtype) {
  int64_t elements = 1;
  for (int64_t extent : shape) {
    if (extent < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative extent in tensor shape ", ShapeString(shape)));
    }
    elements *= extent;
  }
  Tensor tensor;
  ASSIGN_OR_RETURN(
      tensor.allocation_,
      allocator.Allocate(pool, component, elements * DTypeBytes(dtype)));
  tensor.shape_ = std::move(shape);
  tensor.elements_ = elements;
  tensor.dtype_ = dtype;
  return tensor;
}

absl::StatusOr<Tensor> Tensor::Create(AccountedAllocator& allocator,
                                      const BufferSpec& spec) {
  return Create(allocator, spec.pool, spec.component,
                std::vector<int64_t>(spec.shape.begin(), spec.shape.end()),
                spec.dtype);
}

void Tensor::Reset() {
  allocation_.Reset();
  shape_.clear();
  elements_ = 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t ShapeElements(const std::vector<int64_t>& shape) {
  int64_t elements = 1;
  for (int64_t extent : shape) elements *= extent;
  return elements;
}

}  // namespace plateau::engine
