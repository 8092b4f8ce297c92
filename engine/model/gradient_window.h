// With bf16 gradient accumulation (ModelConfig::bf16_gradients), the
// float32 window that one backward pass over a layer (or the head)
// accumulates its product weights' gradients in. It opens holding the
// stored bf16 gradients widened; the pass adds to it as it would to float32
// gradients (its products' several accumulations, PipelinedLLEP's chunks,
// the borrowed experts' returns); closing rounds it back to the stored
// bf16, to nearest even, once. So a micro-batch's gradient is rounded once a
// pass, whatever order the pass accumulated it in, and without bf16
// accumulation the same float32 buffer would have held the float32 value
// the window rounds.
#ifndef PLATEAU_ENGINE_MODEL_GRADIENT_WINDOW_H_
#define PLATEAU_ENGINE_MODEL_GRADIENT_WINDOW_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/memory/footprint.h"
#include "engine/memory/tensor.h"
#include "engine/model/split_buffers.h"
#include "kernels/ops.h"

namespace plateau::engine {

// Layout elements [offset, offset + elements).
struct LayoutRange {
  int64_t offset = 0;
  int64_t elements = 0;
};

class GradientWindow {
 public:
  // Allocates `spec` and widens the gradients of `ranges` into it, one after
  // the other. REQUIRES: every range lies in gradients' bf16 buffer.
  // INTERNAL if spec's elements are not the ranges' (a layout the window's
  // buffer was not sized for).
  static absl::StatusOr<GradientWindow> Open(const SplitBuffers& gradients,
                                             std::vector<LayoutRange> ranges,
                                             const BufferSpec& spec,
                                             kernels::Ops& ops,
                                             AccountedAllocator& allocator);

  // The window's float32 gradient for layout offset `offset`; nullptr if
  // it lies in none of the ranges.
  float* At(int64_t offset);
  // Rounds the window back into the stored gradients and frees it; a no-op
  // once closed. A window dropped unclosed loses its pass's gradients.
  void Close(kernels::Ops& ops);

 private:
  GradientWindow(const SplitBuffers& gradients, std::vector<LayoutRange> ranges,
                 Tensor window);

  SplitBuffers gradients_;
  std::vector<LayoutRange> ranges_;
  Tensor window_;  // the ranges' gradients, one after the other
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_GRADIENT_WINDOW_H_
