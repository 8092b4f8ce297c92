// A model shard's weights on the device (Model::weight_buffers): its flat
// layout (ParameterLayout) in one float32 buffer, or with bf16 weight
// storage (ParameterLayout::bf16_weight_storage) [0, product_begin()) in a
// float32 buffer and the product weights [product_begin(), total) in a
// bf16 one. Offsets are the layout's, whichever buffer holds them; a range
// of the layout's regions (ZeroRegionsOf) lies in one buffer.
#ifndef PLATEAU_ENGINE_MODEL_WEIGHT_BUFFERS_H_
#define PLATEAU_ENGINE_MODEL_WEIGHT_BUFFERS_H_

#include <cstdint>

#include "engine/memory/tensor.h"

namespace plateau::engine {

struct WeightBuffers {
  Tensor* float32 = nullptr;
  // Empty without bf16 weight storage.
  Tensor* bf16 = nullptr;
  // The first offset held in bf16: float32's elements.
  int64_t bf16_begin = 0;

  bool InBf16(int64_t offset) const { return offset >= bf16_begin; }
  // REQUIRES: !InBf16(offset).
  float* Float32At(int64_t offset) const { return float32->f32() + offset; }
  // REQUIRES: InBf16(offset).
  uint16_t* Bf16At(int64_t offset) const {
    return bf16->bf16() + (offset - bf16_begin);
  }
};

// All of a layout in one float32 buffer (no bf16 weight storage).
inline WeightBuffers Float32Weights(Tensor* weights) {
  return {weights, nullptr, weights->elements()};
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_WEIGHT_BUFFERS_H_
