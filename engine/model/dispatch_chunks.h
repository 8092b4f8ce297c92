// PipelinedLLEP's chunks (docs/ARCHITECTURE.md section 2): a layer's routed
// token copies go to the experts in K chunks, and in each chunk a source rank
// sends at most `cap` copies to any destination rank, so a rank receives at
// most expert ranks x cap copies per chunk however skewed the routing. K is the
// smallest count that keeps every (source, destination) pair under the cap;
// copy i of a pair's list goes to chunk i mod K, so every chunk holds a
// share of every expert.
//
// A pair's list holds the source's copies for the destination's own experts
// (in expert, then token order), then those for the experts it borrowed
// (ExpertSpill: the spilled copies are the last of the source's copies for
// that expert). Every rank derives the same K and the same received layout
// from the plan's all-reduced count matrix and the spills; which copies a
// chunk holds, from its own routing.
#ifndef PLATEAU_ENGINE_MODEL_DISPATCH_CHUNKS_H_
#define PLATEAU_ENGINE_MODEL_DISPATCH_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/expert_spill.h"
#include "engine/model/layer_context.h"
#include "engine/model/token_dispatcher.h"

namespace plateau::engine {

class DispatchChunks {
 public:
  DispatchChunks() = default;

  // `plan` is the layer's whole dispatch plan; `spills` from
  // PlanExpertSpill over its counts (empty: every copy to its expert's
  // owner). INVALID_ARGUMENT when cap < 1.
  static absl::StatusOr<DispatchChunks> Split(const LayerContext& context,
                                              const DispatchPlan& plan,
                                              int64_t cap,
                                              std::vector<ExpertSpill> spills);

  int64_t count() const { return chunks_; }
  const std::vector<ExpertSpill>& spills() const { return spills_; }

  // Chunk c as a plan of its own (the dispatcher's and experts' functions
  // take it as they take a whole plan): its copies' rows, numbered within
  // the chunk, and -1 in assignment_row for the copies of other chunks.
  // Its two int32 arrays are new device tensors (dispatch).
  absl::StatusOr<DispatchPlan> Chunk(const LayerContext& context,
                                     int64_t chunk) const;

 private:
  // One block of a source's list for this rank: that many copies of an
  // expert (own or borrowed), in list order.
  struct ReceivedBlock {
    int64_t local_expert = 0;
    bool borrowed = false;
    int64_t copies = 0;
  };

  int64_t chunks_ = 0;
  int ranks_ = 1;
  std::vector<ExpertSpill> spills_;
  // Sending: each local row's destination and index in that pair's list,
  // and every list's length.
  std::vector<int32_t> row_destination_;
  std::vector<int64_t> row_index_;
  std::vector<int64_t> send_list_rows_;  // (ranks)
  // Receiving: every source's list for this rank, block by block.
  std::vector<std::vector<ReceivedBlock>> received_;
  std::vector<int32_t> assignment_row_;  // host copy of the plan's
  std::vector<int32_t> row_token_;       // host copy of the plan's
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_DISPATCH_CHUNKS_H_
