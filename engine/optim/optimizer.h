// The optimizer interface: one update of the parameters this rank owns from
// their gradients, with state that checkpoints save and restore as pieces of
// whole-model tensors (so a checkpoint does not depend on how the model was
// spread over ranks).
#ifndef PLATEAU_ENGINE_OPTIM_OPTIMIZER_H_
#define PLATEAU_ENGINE_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/memory/memory_component.h"
#include "engine/optim/optimizer_footprint.h"

namespace plateau::engine {

// Elements [offset, offset + elements) (row-major) of the whole-model tensor
// `name`, held by this rank at `data` in `pool`; or, with bfloat16_data
// instead, stored as bfloat16 here and as float32 in checkpoints.
struct TensorPiece {
  std::string name;
  std::vector<int64_t> global_shape;
  int64_t offset = 0;
  int64_t elements = 0;
  float* data = nullptr;
  MemoryPool pool = MemoryPool::kDevice;
  uint16_t* bfloat16_data = nullptr;
  // Other ranks hold the same values and one of them saves them: this rank
  // only loads the piece.
  bool replica = false;
};

// Whole-model tensors by name.
using TensorShapes = std::map<std::string, std::vector<int64_t>>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Updates the owned weights from their gradients. step is 1 for the first
  // update. Fails only when a collective the update needs fails.
  virtual absl::Status Step(float learning_rate, int64_t step) = 0;

  // The master weights this optimizer keeps apart from the model's buffer
  // (with optimizer offload: the owned parameters' float32 copy on the
  // host), as pieces of the whole-model weights, named as they are; empty
  // when it updates the model's buffer in place. They are the weights'
  // source of truth: whatever writes weights (a checkpoint or init_from
  // load) writes them too, and checkpoints save them. They start as the
  // model's weights when the optimizer is created.
  virtual std::vector<TensorPiece> MasterPieces() = 0;

  // This rank's state, in a fixed order; the pieces stay valid for the
  // optimizer's lifetime. Named "<parameter>.<state>" (PyTorch's AdamW:
  // exp_avg, exp_avg_sq; factored second moments: exp_avg_sq_row,
  // exp_avg_sq_col, as Hugging Face's Adafactor names them).
  virtual std::vector<TensorPiece> StatePieces() = 0;

  // This rank's state bytes by tier ("dense", "expert", "router"): the
  // plateau_optimizer_state_bytes metric.
  virtual std::map<std::string, int64_t> StateBytesByTier() const = 0;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_OPTIMIZER_H_
