// The pools and components every engine allocation is charged to (DESIGN.md
// section 5). Their names are the `pool` and `component` label values of the
// memory metrics, so they are a contract.
#ifndef PLATEAU_WORKER_ENGINE_MEMORY_MEMORY_COMPONENT_H_
#define PLATEAU_WORKER_ENGINE_MEMORY_MEMORY_COMPONENT_H_

namespace plateau::engine {

enum class MemoryPool { kDevice, kHost };
inline constexpr int kMemoryPoolCount = 2;

enum class MemoryComponent {
  kWeights,
  kGradients,
  kOptimizer,
  kDispatch,
  kVocabProjection,
  kCheckpoint,
  kAttention,
  kActivations,
  kStaging,
  kOther,
};
inline constexpr int kMemoryComponentCount = 10;

// "device", "host".
const char* MemoryPoolName(MemoryPool pool);
// "weights", "vocab_projection", ...
const char* MemoryComponentName(MemoryComponent component);

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_MEMORY_MEMORY_COMPONENT_H_
