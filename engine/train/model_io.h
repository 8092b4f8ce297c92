// Moving model weights and optimizer state between device memory and
// safetensors files, by the whole-model tensor names of docs/ARCHITECTURE.md
// section 8. A rank holds pieces of whole tensors (TensorPiece); files hold
// whole tensors, so a checkpoint does not depend on how the model was spread
// over ranks: writing gathers every rank's pieces into whole tensors on rank 0,
// reading copies each rank's pieces out of the whole tensors. Reading is
// strict: the file must hold exactly the expected tensors, F32, with the
// expected shapes.
#ifndef PLATEAU_ENGINE_TRAIN_MODEL_IO_H_
#define PLATEAU_ENGINE_TRAIN_MODEL_IO_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/memory/tensor.h"
#include "engine/model/model.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/communicator.h"
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

// The weights this rank sends to a checkpoint (`sent`, CheckpointWeightsOf):
// with from_masters its optimizer's `masters` (Optimizer::MasterPieces)
// and the model's pieces of the weights no optimizer trains; else the
// model's pieces.
std::vector<TensorPiece> CheckpointWeightPieces(
    Model& model, const CheckpointWeights& sent,
    std::vector<TensorPiece> masters);

// Whole tensors in host memory (component `staging`, freed with this
// object), sorted by name.
struct HostSnapshot {
  Tensor host;
  std::vector<TensorView> views;  // into `host`
};

// Collective over `world` (null: this rank alone): every rank's pieces are
// sent to rank 0, which assembles the whole tensors. Rank 0 gets them, the
// other ranks an empty snapshot. Replica pieces are left out (another rank
// sends the same values). INTERNAL naming the tensor when the pieces of all
// ranks do not cover it exactly once.
absl::StatusOr<HostSnapshot> GatherWholeTensors(
    const std::vector<TensorPiece>& pieces, Communicator* world,
    kernels::Ops& ops, AccountedAllocator& allocator);

// OK when `file` holds exactly `expected`, each F32 at its shape; else
// INVALID_ARGUMENT naming the file and every missing, unexpected or
// mis-shaped tensor.
absl::Status CheckWholeTensors(const SafetensorsReader& file,
                               const TensorShapes& expected);

// Copies every piece out of `file`, which must hold exactly `expected`
// (CheckWholeTensors); nothing is copied otherwise.
absl::Status LoadPieces(const SafetensorsReader& file,
                        const TensorShapes& expected,
                        const std::vector<TensorPiece>& pieces,
                        kernels::Ops& ops);

// LoadPieces of every weight: `pieces` are this rank's (WeightPieces of
// both regions, and an optimizer's MasterPieces where it keeps masters).
absl::Status LoadWeights(const SafetensorsReader& file,
                         const ModelConfig& config,
                         const std::vector<TensorPiece>& pieces,
                         kernels::Ops& ops);
// The same for a whole-model `model` alone.
absl::Status LoadWeights(const SafetensorsReader& file, Model& model);

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
