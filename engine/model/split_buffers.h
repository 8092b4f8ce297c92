// A model shard's flat layout (ParameterLayout) on the device, held in one
// float32 buffer, or split: [0, bf16_begin) in a float32 buffer and
// [bf16_begin, total) in a bf16 one. The weights are split with bf16
// weight storage (ParameterLayout::bf16_weight_storage, Model::
// weight_buffers), the gradients with bf16 gradient accumulation
// (ParameterLayout::bf16_gradients, Model::gradient_buffers); bf16_begin is
// then bf16_begin(). Offsets are the layout's, whichever buffer holds
// them; a range of the layout's regions (ZeroRegionsOf) lies in one buffer.
#ifndef PLATEAU_ENGINE_MODEL_SPLIT_BUFFERS_H_
#define PLATEAU_ENGINE_MODEL_SPLIT_BUFFERS_H_

#include <cstdint>

#include "engine/memory/tensor.h"

namespace plateau::engine {

struct SplitBuffers {
  Tensor* float32 = nullptr;
  // Empty when the layout is held in float32 alone.
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

// All of a layout in one float32 buffer.
inline SplitBuffers AllFloat32(Tensor* buffer) {
  return {buffer, nullptr, buffer->elements()};
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_SPLIT_BUFFERS_H_
