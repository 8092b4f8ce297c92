// Moving model weights and optimizer state between device memory and
// checkpoints or safetensors files, by the whole-model tensor names of
// docs/ARCHITECTURE.md section 8. A rank holds pieces of whole tensors
// (TensorPiece); a checkpoint stores chunks of whole tensors, so it does not
// depend on how the model was spread over ranks: every rank writes the
// pieces of its ZeRO shards (OwnedWeightPieces, the optimizer's state) and
// reads what it needs of any layout's chunks. Reading is strict: the source
// must hold exactly the expected tensors, F32, with the expected shapes.
#ifndef PLATEAU_ENGINE_TRAIN_MODEL_IO_H_
#define PLATEAU_ENGINE_TRAIN_MODEL_IO_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/checkpoint/tensor_source.h"
#include "engine/memory/tensor.h"
#include "engine/model/model.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/optimizer_footprint.h"
#include "engine/train/checkpoint_footprint.h"
#include "engine/train/hf_model_directory.h"
#include "kernels/ops.h"

namespace plateau::engine {

// The whole model's weights.
TensorShapes WeightShapes(const ModelConfig& config);

// This rank's weights as pieces: the dense parameters, those split over the
// expert-parallel ranks (ParameterLayout::SplitOverExpertRanks), or both.
std::vector<TensorPiece> WeightPieces(Model& model, bool dense, bool experts);

// With bf16 weight storage: sets the pieces of `masters` (an optimizer's
// MasterPieces, host float32) that the device stores in bf16 to their
// initial weights (InitialWeights, as Model::InitializeWeights(seed) sets
// the device's) exactly, where the optimizer made them from the device's
// rounded values. The other masters are the device's values already; a
// no-op without bf16 weight storage.
void InitializeMasters(uint64_t seed, const ParameterLayout& layout,
                       const std::vector<TensorPiece>& masters);

// The parts of this rank's weights that lie in its ZeRO shards (`owned`,
// ranges of the model's flat buffer; ZeroShards::owned), as the model
// stores them: of the parameters the optimizers train (`trained`), of the
// others (`untrained`), or both. Over the ranks of a layout every element
// of every weight is in exactly one rank's parts, so a checkpoint is
// written from them and loaded into them; the replicas get the rest from
// ZeroShards::GatherWeights.
std::vector<TensorPiece> OwnedWeightPieces(Model& model,
                                           const std::vector<OwnedRange>& owned,
                                           bool trained, bool untrained);

// This rank's pieces copied to host memory for a checkpoint write
// (component `snapshot`, freed with this object), as chunks for
// WriteCheckpointShard. Replica pieces are left out (another rank writes
// the same values).
struct ShardSnapshot {
  Tensor host;
  ShardContents contents;  // into `host`
};
absl::StatusOr<ShardSnapshot> SnapshotShard(
    const std::vector<TensorPiece>& weights,
    const std::vector<TensorPiece>& optimizer_state, kernels::Ops& ops,
    AccountedAllocator& allocator);

// OK when `source` holds exactly `expected`, each F32 at its shape; else
// INVALID_ARGUMENT naming the source and every missing, unexpected or
// mis-shaped tensor.
absl::Status CheckWholeTensors(const TensorSource& source,
                               const TensorShapes& expected);

// Copies every piece out of `source`, which must hold exactly `expected`
// (CheckWholeTensors; nothing is copied otherwise). Pieces of the same
// elements (a weight and its master) are read once. A read that fails
// (DATA_LOSS for a damaged chunk) leaves the pieces partly loaded.
absl::Status LoadPieces(const TensorSource& source,
                        const TensorShapes& expected,
                        const std::vector<TensorPiece>& pieces,
                        kernels::Ops& ops);

// LoadPieces of every weight: `pieces` are this rank's (WeightPieces or
// OwnedWeightPieces, and an optimizer's MasterPieces where it keeps
// masters).
absl::Status LoadWeights(const TensorSource& source, const ModelConfig& config,
                         const std::vector<TensorPiece>& pieces,
                         kernels::Ops& ops);
// The same for a whole-model `model` alone.
absl::Status LoadWeights(const TensorSource& source, Model& model);

// Copies this rank's pieces of every weight that `directory` has values for
// (all but the expert bias, which keeps its value) into `pieces` (as
// LoadWeights takes them), a bounded chunk at a time. REQUIRES: directory
// was opened for the pieces' model config.
void LoadHfWeights(const HfModelDirectory& directory,
                   const std::vector<TensorPiece>& pieces, kernels::Ops& ops);
// The same for a whole-model `model` alone.
void LoadHfWeights(const HfModelDirectory& directory, Model& model);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_MODEL_IO_H_
