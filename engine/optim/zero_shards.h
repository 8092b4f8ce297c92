// ZeRO-1 over the regions of a model shard's flat buffers (see
// ParameterLayout): the dense region is replicated on every rank of the
// stage's batch group (expert x data parallel), and is split in three there
// (its parameters read in float32, the embedding, its product weights:
// ZeroRegionsOf), so that bf16 storage of the embedding and the product
// weights can move them apart; the expert
// region is replicated on every rank of its data-parallel group. Each region's
// gradients are summed and scattered over its group, each rank updates only its
// shard of each region (so optimizer state is split across the replicas), and
// the updated shards are gathered back. With groups of one rank the shards are
// the whole regions and nothing moves.
//
// REQUIRES: the layout's regions are padded to multiples of their groups'
// sizes (ModelShard::dense_alignment / expert_alignment).
#ifndef PLATEAU_ENGINE_OPTIM_ZERO_SHARDS_H_
#define PLATEAU_ENGINE_OPTIM_ZERO_SHARDS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/parameter_layout.h"
#include "engine/model/split_buffers.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/optimizer_footprint.h"
#include "engine/parallel/communicator.h"
#include "kernels/ops.h"

namespace plateau::engine {

class ZeroShards {
 public:
  // Null groups: this rank alone.
  ZeroShards(const ParameterLayout& layout, Communicator* dense_group,
             Communicator* expert_group);

  // This rank's shard of each region, in buffer order.
  const std::vector<OwnedRange>& owned() const { return owned_; }

  // Sums each region's gradients over its group; afterwards this rank's
  // shards of `gradients` hold the sums (the rest of it is stale). bf16
  // gradients are summed in float32, a chunk at a time, and each sum is
  // rounded once (ReduceScatterBuffer).
  absl::Status ReduceGradients(const SplitBuffers& gradients, kernels::Ops& ops,
                               AccountedAllocator& allocator) const;
  // Sum of squares of this rank's shards of the gradients, and their
  // scaling by `factor` (clipping); bf16 ones are widened a chunk at a time
  // (OwnedGradientChunkBuffer), and scaled ones rounded again.
  absl::StatusOr<double> OwnedSumOfSquares(const SplitBuffers& gradients,
                                           kernels::Ops& ops,
                                           AccountedAllocator& allocator) const;
  absl::Status ScaleOwned(const SplitBuffers& gradients, float factor,
                          kernels::Ops& ops,
                          AccountedAllocator& allocator) const;
  // Copies every rank's updated shards of the weights to all replicas, in
  // the type the device stores them in (bf16: half the bytes).
  absl::Status GatherWeights(const SplitBuffers& weights, kernels::Ops& ops,
                             AccountedAllocator& allocator) const;

 private:
  // visit(count, values) over this rank's shards of the gradients in
  // float32: in place, or for bf16 ones widened a chunk at a time (and
  // rounded back when write_back).
  template <typename Visit>
  absl::Status ForEachOwnedFloat32(const SplitBuffers& gradients,
                                   bool write_back, kernels::Ops& ops,
                                   AccountedAllocator& allocator,
                                   Visit visit) const;

  // ZeroRegionsOf's regions, and the group each is split over (null: this
  // rank alone).
  std::vector<ZeroRegion> regions_;
  std::vector<Communicator*> groups_;
  std::vector<OwnedRange> owned_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_ZERO_SHARDS_H_
