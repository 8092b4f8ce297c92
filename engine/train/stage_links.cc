#include "engine/train/stage_links.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace plateau::engine {
namespace {

uint32_t ForwardTag(int64_t id) { return static_cast<uint32_t>(2 * id); }
uint32_t BackwardTag(int64_t id) { return static_cast<uint32_t>(2 * id + 1); }

absl::Status CheckSent(const Tensor& tensor, const BufferSpec& spec,
                       const char* what) {
  if (tensor.dtype() != spec.dtype || tensor.bytes() < spec.bytes()) {
    return absl::InternalError(absl::StrCat(
        what, " of ", tensor.bytes(), " bytes of ", DTypeName(tensor.dtype()),
        "; the stage expects ", spec.bytes(), " of ", DTypeName(spec.dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

StageLinks::StageLinks(const RankContext& ranks, const BufferSpec& activations,
                       const BufferSpec& gradients,
                       AccountedAllocator* allocator)
    : ranks_(ranks),
      activations_(activations),
      gradients_(gradients),
      allocator_(allocator) {}

absl::StatusOr<Tensor> StageLinks::ReceiveForward(int64_t id) {
  if (ranks_.first_stage()) return Tensor();
  ASSIGN_OR_RETURN(Tensor input, Tensor::Create(*allocator_, activations_));
  RETURN_IF_ERROR(ranks_.pipeline->Receive(
      input.data(), activations_.bytes(), ranks_.pp_index - 1, ForwardTag(id)));
  return input;
}

absl::Status StageLinks::SendForward(const Tensor& activations, int64_t id) {
  if (ranks_.last_stage()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckSent(activations, activations_, "activations"));
  return ranks_.pipeline->Send(activations.data(), activations_.bytes(),
                               ranks_.pp_index + 1, ForwardTag(id));
}

absl::StatusOr<Tensor> StageLinks::ReceiveBackward(int64_t id) {
  if (ranks_.last_stage()) return Tensor();
  ASSIGN_OR_RETURN(Tensor gradient, Tensor::Create(*allocator_, gradients_));
  RETURN_IF_ERROR(ranks_.pipeline->Receive(gradient.data(), gradients_.bytes(),
                                           ranks_.pp_index + 1,
                                           BackwardTag(id)));
  return gradient;
}

absl::Status StageLinks::SendBackward(const Tensor& gradient, int64_t id) {
  if (ranks_.first_stage()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckSent(gradient, gradients_, "gradient"));
  return ranks_.pipeline->Send(gradient.data(), gradients_.bytes(),
                               ranks_.pp_index - 1, BackwardTag(id));
}

absl::StatusOr<Tensor> StageLinks::SendForwardReceiveBackward(
    const Tensor& activations, int64_t sent_id, int64_t received_id) {
  if (ranks_.last_stage()) return Tensor();
  RETURN_IF_ERROR(CheckSent(activations, activations_, "activations"));
  ASSIGN_OR_RETURN(Tensor gradient, Tensor::Create(*allocator_, gradients_));
  const int next = ranks_.pp_index + 1;
  RETURN_IF_ERROR(ranks_.pipeline->SendAndReceive(
      activations.data(), activations_.bytes(), next, ForwardTag(sent_id),
      gradient.data(), gradients_.bytes(), next, BackwardTag(received_id)));
  return gradient;
}

absl::StatusOr<Tensor> StageLinks::SendBackwardReceiveForward(
    const Tensor& gradient, int64_t sent_id, int64_t received_id) {
  if (ranks_.first_stage()) return Tensor();
  RETURN_IF_ERROR(CheckSent(gradient, gradients_, "gradient"));
  ASSIGN_OR_RETURN(Tensor input, Tensor::Create(*allocator_, activations_));
  const int previous = ranks_.pp_index - 1;
  RETURN_IF_ERROR(ranks_.pipeline->SendAndReceive(
      gradient.data(), gradients_.bytes(), previous, BackwardTag(sent_id),
      input.data(), activations_.bytes(), previous, ForwardTag(received_id)));
  return input;
}

}  // namespace plateau::engine
