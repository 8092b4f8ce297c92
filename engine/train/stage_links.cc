#include "engine/train/stage_links.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace plateau::engine {
namespace {

uint32_t ForwardTag(int64_t id) { return static_cast<uint32_t>(2 * id); }
uint32_t BackwardTag(int64_t id) { return static_cast<uint32_t>(2 * id + 1); }

absl::Status CheckSize(const Tensor& tensor, int64_t bytes, const char* what) {
  if (tensor.bytes() < bytes) {
    return absl::InternalError(absl::StrCat(
        what, " of ", tensor.bytes(), " bytes; the stage expects ", bytes));
  }
  return absl::OkStatus();
}

}  // namespace

StageLinks::StageLinks(const RankContext& ranks, int64_t activation_rows,
                       int64_t d_model, AccountedAllocator* allocator)
    : ranks_(ranks),
      activation_rows_(activation_rows),
      d_model_(d_model),
      allocator_(allocator) {}

int64_t StageLinks::bytes() const {
  return activation_rows_ * d_model_ * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<Tensor> StageLinks::Allocate() const {
  return Tensor::Create(*allocator_, MemoryPool::kDevice,
                        MemoryComponent::kActivations,
                        {activation_rows_, d_model_});
}

absl::StatusOr<Tensor> StageLinks::ReceiveForward(int64_t id) {
  if (ranks_.first_stage()) return Tensor();
  ASSIGN_OR_RETURN(Tensor input, Allocate());
  RETURN_IF_ERROR(ranks_.pipeline->Receive(
      input.f32(), bytes(), ranks_.pp_index - 1, ForwardTag(id)));
  return input;
}

absl::Status StageLinks::SendForward(const Tensor& activations, int64_t id) {
  if (ranks_.last_stage()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckSize(activations, bytes(), "activations"));
  return ranks_.pipeline->Send(activations.f32(), bytes(), ranks_.pp_index + 1,
                               ForwardTag(id));
}

absl::StatusOr<Tensor> StageLinks::ReceiveBackward(int64_t id) {
  if (ranks_.last_stage()) return Tensor();
  ASSIGN_OR_RETURN(Tensor gradient, Allocate());
  RETURN_IF_ERROR(ranks_.pipeline->Receive(
      gradient.f32(), bytes(), ranks_.pp_index + 1, BackwardTag(id)));
  return gradient;
}

absl::Status StageLinks::SendBackward(const Tensor& gradient, int64_t id) {
  if (ranks_.first_stage()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckSize(gradient, bytes(), "gradient"));
  return ranks_.pipeline->Send(gradient.f32(), bytes(), ranks_.pp_index - 1,
                               BackwardTag(id));
}

absl::StatusOr<Tensor> StageLinks::SendForwardReceiveBackward(
    const Tensor& activations, int64_t sent_id, int64_t received_id) {
  if (ranks_.last_stage()) return Tensor();
  RETURN_IF_ERROR(CheckSize(activations, bytes(), "activations"));
  ASSIGN_OR_RETURN(Tensor gradient, Allocate());
  const int next = ranks_.pp_index + 1;
  RETURN_IF_ERROR(ranks_.pipeline->SendAndReceive(
      activations.f32(), bytes(), next, ForwardTag(sent_id), gradient.f32(),
      bytes(), next, BackwardTag(received_id)));
  return gradient;
}

absl::StatusOr<Tensor> StageLinks::SendBackwardReceiveForward(
    const Tensor& gradient, int64_t sent_id, int64_t received_id) {
  if (ranks_.first_stage()) return Tensor();
  RETURN_IF_ERROR(CheckSize(gradient, bytes(), "gradient"));
  ASSIGN_OR_RETURN(Tensor input, Allocate());
  const int previous = ranks_.pp_index - 1;
  RETURN_IF_ERROR(ranks_.pipeline->SendAndReceive(
      gradient.f32(), bytes(), previous, BackwardTag(sent_id), input.f32(),
      bytes(), previous, ForwardTag(received_id)));
  return input;
}

}  // namespace plateau::engine
