// The pools and components every engine allocation is charged to
// (docs/ARCHITECTURE.md section 5). Their names are the `pool` and
// `component` label values of the memory metrics, so they are a contract; the
// API (proto/memory.proto) has the same enums, and the functions below are
// the one mapping between the two.
#ifndef PLATEAU_ENGINE_MEMORY_MEMORY_COMPONENT_H_
#define PLATEAU_ENGINE_MEMORY_MEMORY_COMPONENT_H_

#include "proto/memory.pb.h"

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
  kSnapshot,
  kOther,
};
inline constexpr int kMemoryComponentCount = 11;

// "device", "host".
const char* MemoryPoolName(MemoryPool pool);
// "weights", "vocab_projection", ...
const char* MemoryComponentName(MemoryComponent component);

// The API's value of the same name (kVocabProjection ->
// MEMORY_COMPONENT_VOCAB_PROJECTION).
v1::MemoryPool MemoryPoolProto(MemoryPool pool);
v1::MemoryComponent MemoryComponentProto(MemoryComponent component);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_MEMORY_COMPONENT_H_
