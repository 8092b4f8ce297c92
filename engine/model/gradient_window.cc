#include "engine/model/gradient_window.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace plateau::engine {

GradientWindow::GradientWindow(const SplitBuffers& gradients,
                               std::vector<LayoutRange> ranges, Tensor window)
    : gradients_(gradients),
      ranges_(std::move(ranges)),
      window_(std::move(window)) {}

absl::StatusOr<GradientWindow> GradientWindow::Open(
    const SplitBuffers& gradients, std::vector<LayoutRange> ranges,
    const BufferSpec& spec, kernels::Ops& ops, AccountedAllocator& allocator) {
  int64_t elements = 0;
  for (const LayoutRange& range : ranges) elements += range.elements;
  if (elements != spec.elements()) {
    return absl::InternalError(
        absl::StrCat("a gradient window of ", spec.elements(),
                     " elements cannot hold its ", elements, " gradients"));
  }
  ASSIGN_OR_RETURN(Tensor window, Tensor::Create(allocator, spec));
  float* next = window.f32();
  for (const LayoutRange& range : ranges) {
    ops.CopyFromBf16(range.elements, gradients.Bf16At(range.offset), next);
    next += range.elements;
  }
  return GradientWindow(gradients, std::move(ranges), std::move(window));
}

float* GradientWindow::At(int64_t offset) {
  float* start = window_.f32();
  for (const LayoutRange& range : ranges_) {
    if (offset >= range.offset && offset < range.offset + range.elements) {
      return start + (offset - range.offset);
    }
    start += range.elements;
  }
  return nullptr;
}

void GradientWindow::Close(kernels::Ops& ops) {
  if (window_.empty()) return;
  const float* next = window_.f32();
  for (const LayoutRange& range : ranges_) {
    ops.CopyToBf16(range.elements, next, gradients_.Bf16At(range.offset));
    next += range.elements;
  }
  window_.Reset();
}

}  // namespace plateau::engine
