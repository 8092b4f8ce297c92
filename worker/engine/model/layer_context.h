// What every block of a training step needs: the model's shape, the backend's
// ops and the accounted allocator, and the size of the current batch.
#ifndef PLATEAU_WORKER_ENGINE_MODEL_LAYER_CONTEXT_H_
#define PLATEAU_WORKER_ENGINE_MODEL_LAYER_CONTEXT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "worker/engine/memory/tensor.h"
#include "worker/engine/model/model_config.h"

namespace plateau::engine {

struct LayerContext {
  const ModelConfig* config = nullptr;
  kernels::Ops* ops = nullptr;
  AccountedAllocator* allocator = nullptr;
  // Sequences in the batch; tokens = sequences * config->seq_len.
  int64_t sequences = 0;

  int64_t tokens() const { return sequences * config->seq_len; }

  // A device tensor charged to `component`; contents uninitialised.
  absl::StatusOr<Tensor> Allocate(MemoryComponent component,
                                  std::vector<int64_t> shape,
                                  DType dtype = DType::kFloat32) const {
    return Tensor::Create(*allocator, MemoryPool::kDevice, component,
                          std::move(shape), dtype);
  }
};

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_MODEL_LAYER_CONTEXT_H_
