// Zero bits in every element of a tensor on the device, whatever its element
// type, through the backend's float32 fill (the backends have no bf16 one).
#ifndef PLATEAU_ENGINE_MODEL_FILL_WITH_ZEROS_H_
#define PLATEAU_ENGINE_MODEL_FILL_WITH_ZEROS_H_

#include <cstdint>

#include "engine/memory/tensor.h"
#include "kernels/ops.h"

namespace plateau::engine {

inline void FillWithZeros(kernels::Ops& ops, Tensor& values) {
  const int64_t bytes = values.bytes();
  if (bytes == 0) return;
  constexpr int64_t kFloat = sizeof(float);
  ops.Fill(bytes / kFloat, 0.0f, static_cast<float*>(values.data()));
  // An odd bf16 at the end (never more than one element's bytes).
  if (const int64_t rest = bytes % kFloat; rest > 0) {
    const uint8_t zeros[kFloat] = {};
    ops.CopyFromHost(rest, zeros,
                     static_cast<uint8_t*>(values.data()) + bytes - rest);
  }
}

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_FILL_WITH_ZEROS_H_
