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
#include "engine/memory/tensor.h"
#include "engine/train/rank_context.h"

namespace plateau::engine {

class StageLinks {
 public:
  // Received tensors are (activation_rows, d_model) float32, device pool,
  // component `activations`. Micro-batch ids must be < 2^30; ids from
  // `first_id` on keep apart passes that share the links (training uses 0,
  // evaluation kEvaluationIds).
  StageLinks(const RankContext& ranks, int64_t activation_rows, int64_t d_model,
             AccountedAllocator* allocator);

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
  absl::StatusOr<Tensor> Allocate() const;
  int64_t bytes() const;

  RankContext ranks_;
  int64_t activation_rows_;
  int64_t d_model_;
  AccountedAllocator* allocator_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_STAGE_LINKS_H_
