// What writing a checkpoint allocates (model_io.h's GatherWholeTensors, run
// by Trainer::WriteCheckpoint for the weights, then for the optimizer
// state): rank 0 assembles the whole tensors in a host snapshot and
// receives every other rank's pieces, one rank at a time, packed in
// messages of a bounded device buffer (communicators move device memory);
// every other rank sends its pieces packed alike. The piece lists sent
// first (a few hundred bytes each, through the same kind of buffer) are
// left out of the footprint.
#ifndef PLATEAU_ENGINE_TRAIN_CHECKPOINT_FOOTPRINT_H_
#define PLATEAU_ENGINE_TRAIN_CHECKPOINT_FOOTPRINT_H_

#include <cstdint>
#include <vector>

#include "engine/memory/footprint.h"
#include "engine/model/parameter_layout.h"
#include "engine/optim/optimizer_footprint.h"

namespace plateau::engine {

// The weights a rank sends to a checkpoint: each weight is written by one
// of its replicas, dense weights by the stage's first batch rank, experts
// by their first data-parallel replica. Where an offloaded optimizer keeps
// master weights (Optimizer::MasterPieces), the weights it trains come
// from the masters instead, each rank sending its own (the trained
// elements of its ZeRO shards), and those replicas send only the rest (the
// expert bias).
struct CheckpointWeights {
  bool dense = false;
  bool experts = false;
  bool from_masters = false;
};
CheckpointWeights CheckpointWeightsOf(int ep_index, int dp_index,
                                      bool from_masters);
// Their elements in a shard laid out by `layout`, `owned` its ZeRO shards.
int64_t CheckpointWeightElements(const ParameterLayout& layout,
                                 const CheckpointWeights& weights,
                                 const std::vector<OwnedRange>& owned);

// Host bytes on their way through a communicator: at least one float.
BufferSpec DeviceBytesBuffer(int64_t bytes);
// The elements of one message of `total` packed elements: at most
// kCheckpointChunkElements (16 MiB of float32), at least one. Without the
// bound a rank's pieces went in one message, whose device buffer could be
// as large as its masters (109 GiB a device for docs/SCALE.md's 120B shape
// on 8 devices).
inline constexpr int64_t kCheckpointChunkElements = int64_t{1} << 22;
int64_t CheckpointChunkElements(int64_t total);
// The whole tensors rank 0 writes: host staging.
BufferSpec HostSnapshotBuffer(int64_t elements);

// GatherWholeTensors of one kind of piece. On rank 0 (`gathers`): the host
// snapshot of `whole_elements`, returned live for the caller to free once
// written, while each of `others_elements` arrives packed; elsewhere this
// rank's `own_elements` go packed, and 0 is returned.
FootprintSink::Handle GatherFootprint(
    bool gathers, int64_t own_elements,
    const std::vector<int64_t>& others_elements, int64_t whole_elements,
    FootprintSink& sink);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_CHECKPOINT_FOOTPRINT_H_
