// Moving model weights and optimizer state between device tensors and
// safetensors files, by the parameter names of DESIGN.md section 8. Reading
// is strict: every expected tensor must be present with the expected dtype
// (F32) and shape, and no unexpected tensor may be present.
#ifndef PLATEAU_WORKER_ENGINE_TRAIN_MODEL_IO_H_
#define PLATEAU_WORKER_ENGINE_TRAIN_MODEL_IO_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "worker/engine/checkpoint/safetensors.h"
#include "worker/engine/memory/tensor.h"
#include "worker/engine/model/model.h"
#include "worker/engine/optim/optimizer.h"

namespace plateau::engine {

// A host copy of named device tensors, for writing: the copy is charged to
// the host pool's `staging` component and freed with this object.
struct HostSnapshot {
  Tensor host;
  std::vector<TensorView> views;  // into `host`, in parameter order
};

absl::StatusOr<HostSnapshot> SnapshotWeights(Model& model,
                                             AccountedAllocator& allocator);
absl::StatusOr<HostSnapshot> SnapshotOptimizer(Optimizer& optimizer,
                                               kernels::Ops& ops,
                                               AccountedAllocator& allocator);

// INVALID_ARGUMENT naming the file and every missing, unexpected or
// mis-shaped tensor.
absl::Status LoadWeights(const SafetensorsReader& file, Model& model);
absl::Status LoadOptimizerState(const SafetensorsReader& file,
                                Optimizer& optimizer, kernels::Ops& ops);

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_TRAIN_MODEL_IO_H_
