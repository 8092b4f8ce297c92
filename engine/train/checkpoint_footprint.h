// What writing a checkpoint allocates (Trainer::WriteCheckpoint): every rank
// copies the chunks it writes, the weights of its ZeRO shards and its own
// optimizer state, into one host buffer (component `snapshot`,
// SnapshotShard in model_io.h) that it holds until its files are written
// and synced; nothing is gathered onto one rank.
#ifndef PLATEAU_ENGINE_TRAIN_CHECKPOINT_FOOTPRINT_H_
#define PLATEAU_ENGINE_TRAIN_CHECKPOINT_FOOTPRINT_H_

#include <cstdint>
#include <vector>

#include "engine/memory/footprint.h"
#include "engine/model/parameter_layout.h"
#include "engine/optim/optimizer_footprint.h"

namespace plateau::engine {

// The elements of a shard laid out by `layout` that lie in its ZeRO shards
// `owned`: the weights a rank writes (OwnedWeightPieces, or with an
// offloaded optimizer the same elements from its masters).
int64_t OwnedWeightElements(const ParameterLayout& layout,
                            const std::vector<OwnedRange>& owned);

// The host snapshot of `elements` float32 values.
BufferSpec SnapshotBuffer(int64_t elements);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_CHECKPOINT_FOOTPRINT_H_
