// The optimizer interface: one update of every parameter from its gradient,
// with state that checkpoints name and restore tensor by tensor.
#ifndef PLATEAU_WORKER_ENGINE_OPTIM_OPTIMIZER_H_
#define PLATEAU_WORKER_ENGINE_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace plateau::engine {

// A named piece of optimizer state: `elements` floats at `data` (device
// memory), saved and restored as one checkpoint tensor.
struct OptimizerStateTensor {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
  int64_t elements = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Updates the weights from the gradients. step is 1 for the first update.
  virtual void Step(float learning_rate, int64_t step) = 0;

  // Every state tensor, in a fixed order; the views stay valid for the
  // optimizer's lifetime.
  virtual std::vector<OptimizerStateTensor> StateTensors() = 0;

  // State bytes by tier ("dense", "expert", "router"): the
  // plateau_optimizer_state_bytes metric.
  virtual std::map<std::string, int64_t> StateBytesByTier() const = 0;
};

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_OPTIM_OPTIMIZER_H_
