// What every block of a training step needs: the model's shape, the rank's
// share of it, the backend's ops and accounted allocator, the communicators
// of its parallel groups, and the size of the current micro-batch.
#ifndef PLATEAU_ENGINE_MODEL_LAYER_CONTEXT_H_
#define PLATEAU_ENGINE_MODEL_LAYER_CONTEXT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/tensor.h"
#include "engine/model/model_config.h"
#include "engine/model/model_shard.h"
#include "engine/parallel/communicator.h"
#include "kernels/ops.h"

namespace plateau::engine {

class DispatchStrategy;
class HeadStrategy;

// The groups a model shard talks to. Null (or size-1) groups mean "this rank
// alone".
struct ModelGroups {
  // The ranks that share each layer's experts (expert parallelism).
  Communicator* experts = nullptr;
  // The ranks the batch is split over for this stage (expert x data
  // parallel): batch statistics such as the load balance are summed over
  // them.
  Communicator* batch = nullptr;
};

// How a micro-batch's losses enter the step's loss:
//   loss = (1 / batch tokens) * sum of token cross-entropies
//        + (1 / micro-batches) * sum over micro-batches of their router
//          losses (load balancing and z-loss),
// the batch spanning every micro-batch of every rank of the batch group.
struct LossWeights {
  double cross_entropy_per_token = 1.0;
  double router_losses = 1.0;
};

struct LayerContext {
  const ModelConfig* config = nullptr;
  ModelShard shard;
  kernels::Ops* ops = nullptr;
  AccountedAllocator* allocator = nullptr;
  ModelGroups groups;
  LossWeights loss_weights;
  // Sequences in the micro-batch; tokens = sequences * config->seq_len.
  int64_t sequences = 0;
  // The model's schedules, chosen once from the config:
  // DispatchStrategyFor (dispatch_strategy.h) and HeadStrategyFor
  // (head_strategy.h).
  const DispatchStrategy* dispatch = nullptr;
  const HeadStrategy* head = nullptr;

  int64_t tokens() const { return sequences * config->seq_len; }
  int expert_ranks() const {
    return groups.experts == nullptr ? 1 : groups.experts->size();
  }
  int batch_ranks() const {
    return groups.batch == nullptr ? 1 : groups.batch->size();
  }

  // A device tensor charged to `component`; contents uninitialised.
  absl::StatusOr<Tensor> Allocate(MemoryComponent component,
                                  std::vector<int64_t> shape,
                                  DType dtype = DType::kFloat32) const {
    return Tensor::Create(*allocator, MemoryPool::kDevice, component,
                          std::move(shape), dtype);
  }
  // The buffer a block's footprint names, in its pool.
  absl::StatusOr<Tensor> Allocate(const BufferSpec& spec) const {
    return Tensor::Create(*allocator, spec);
  }
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_LAYER_CONTEXT_H_
