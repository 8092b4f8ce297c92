#include "engine/memory/footprint.h"

#include <utility>

namespace plateau::engine {

int64_t BufferSpec::elements() const {
  int64_t elements = 1;
  for (int64_t extent : shape) elements *= extent;
  return elements;
}

std::optional<int64_t> BufferSpec::checked_bytes() const {
  int64_t bytes = DTypeBytes(dtype);
  for (int64_t extent : shape) {
    if (extent < 0 || __builtin_mul_overflow(bytes, extent, &bytes)) {
      return std::nullopt;
    }
  }
  return bytes;
}

BufferSpec DeviceBuffer(MemoryComponent component, BufferShape shape,
                        DType dtype) {
  BufferSpec spec;
  spec.component = component;
  spec.shape = std::move(shape);
  spec.dtype = dtype;
  return spec;
}

void FootprintSink::FreeAll(std::vector<Handle>* handles) {
  for (Handle& handle : *handles) Free(&handle);
  handles->clear();
}

}  // namespace plateau::engine
