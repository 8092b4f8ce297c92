// PipelinedLLEP's chunks (DESIGN.md section 2): a layer's routed token
// copies go to the experts in K chunks, and in each chunk a source rank sends
// at most `cap` copies to any destination rank, so a rank receives at most
// expert ranks x cap copies per chunk however skewed the routing. K is the
// smallest count that keeps every (source, destination) pair under the cap;
// copy i of a pair's list (in local order: by expert, then token) goes to
// chunk i mod K, so every chunk holds a share of every expert.
//
// Every rank derives the same K and the same received layout from the plan's
// all-reduced count matrix; which copies a chunk holds, from its own routing.
#ifndef PLATEAU_WORKER_ENGINE_MODEL_DISPATCH_CHUNKS_H_
#define PLATEAU_WORKER_ENGINE_MODEL_DISPATCH_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model/layer_context.h"
#include "worker/engine/model/token_dispatcher.h"

namespace plateau::engine {

class DispatchChunks {
 public:
  DispatchChunks() = default;

  // REQUIRES: cap >= 1; `plan` is the layer's whole dispatch plan.
  static absl::StatusOr<DispatchChunks> Split(const LayerContext& context,
                                              const DispatchPlan& plan,
                                              int64_t cap);

  int64_t count() const { return chunks_; }

  // Chunk c as a plan of its own (the dispatcher's and experts' functions
  // take it as they take a whole plan): its copies' rows, numbered within
  // the chunk, and -1 in assignment_row for the copies of other chunks.
  // Its two int32 arrays are new device tensors (dispatch).
  absl::StatusOr<DispatchPlan> Chunk(const LayerContext& context,
                                     int64_t chunk) const;

 private:
  int64_t chunks_ = 0;
  int ranks_ = 1;
  int self_ = 0;
  int64_t local_experts_ = 0;
  int64_t first_expert_ = 0;
  std::vector<int64_t> rank_expert_counts_;  // the plan's
  std::vector<int64_t> expert_offsets_;      // the plan's
  std::vector<int32_t> assignment_row_;      // host copy of the plan's
  std::vector<int32_t> row_token_;           // host copy of the plan's
};

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_MODEL_DISPATCH_CHUNKS_H_
