#include "worker/engine/memory/memory_component.h"

namespace plateau::engine {

const char* MemoryPoolName(MemoryPool pool) {
  switch (pool) {
    case MemoryPool::kDevice:
      return "device";
    case MemoryPool::kHost:
      return "host";
  }
  return "unknown";
}

const char* MemoryComponentName(MemoryComponent component) {
  switch (component) {
    case MemoryComponent::kWeights:
      return "weights";
    case MemoryComponent::kGradients:
      return "gradients";
    case MemoryComponent::kOptimizer:
      return "optimizer";
    case MemoryComponent::kDispatch:
      return "dispatch";
    case MemoryComponent::kVocabProjection:
      return "vocab_projection";
    case MemoryComponent::kCheckpoint:
      return "checkpoint";
    case MemoryComponent::kAttention:
      return "attention";
    case MemoryComponent::kActivations:
      return "activations";
    case MemoryComponent::kStaging:
      return "staging";
    case MemoryComponent::kOther:
      return "other";
  }
  return "unknown";
}

}  // namespace plateau::engine
