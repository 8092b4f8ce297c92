// Moving a micro-batch's activations forward to the next pipeline stage and
// their gradients back to the previous one. Messages are tagged by
// micro-batch and direction, so a forward activation can never be taken for
// a gradient. At the ends of the pipeline the missing neighbour's half of
// each call does nothing (and a receive returns an empty tensor).
//
// The combined calls exist for the 1F1B schedule: two neighbouring stages in
// its steady phase each send to the other at the same time; posting each
// send together with the receive of the other direction lets both complete
// (two blocking sends would wait on each other forever).
#ifndef PLATEAU_ENGINE_TRAIN_STAGE_LINKS_H_
#define PLATEAU_ENGINE_TRAIN_STAGE_LINKS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/memory/footprint.h"
#include "engine/memory/tensor.h"
#include "engine/train/rank_context.h"

namespace plateau::engine {

class StageLinks {
 public:
  // Received activations are `activations` (a layer's input, bf16 under
  // bf16: BoundaryActivationsBuffer), received gradients `gradients` (their
  // gradient, bf16 under bf16 too: ResidualGradientBuffer); what is sent
  // must be of the same type and size. Micro-batch ids must be < 2^30; ids from
  // kEvaluationIds on keep evaluation apart from training (ids from 0),
  // which share the links.
  StageLinks(const RankContext& ranks, const BufferSpec& activations,
             const BufferSpec& gradients, AccountedAllocator* allocator);

  static constexpr int64_t kEvaluationIds = int64_t{1} << 29;

  absl::StatusOr<Tensor> ReceiveForward(int64_t id);
  absl::Status SendForward(const Tensor& activations, int64_t id);
  absl::StatusOr<Tensor> ReceiveBackward(int64_t id);
  absl::Status SendBackward(const Tensor& gradient, int64_t id);
  // SendForward(activations, sent_id) with ReceiveBackward(received_id).
  absl::StatusOr<Tensor> SendForwardReceiveBackward(const Tensor& activations,
                                                    int64_t sent_id,
                                                    int64_t received_id);
  // SendBackward(gradient, sent_id) with ReceiveForward(received_id).
  absl::StatusOr<Tensor> SendBackwardReceiveForward(const Tensor& gradient,
                                                    int64_t sent_id,
                                                    int64_t received_id);

 private:
  RankContext ranks_;
  BufferSpec activations_;
  BufferSpec gradients_;
  AccountedAllocator* allocator_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_STAGE_LINKS_H_
