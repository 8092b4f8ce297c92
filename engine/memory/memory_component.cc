#include "engine/memory/memory_component.h"

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
    case MemoryComponent::kSnapshot:
      return "snapshot";
    case MemoryComponent::kOther:
      return "other";
  }
  return "unknown";
}

v1::MemoryPool MemoryPoolProto(MemoryPool pool) {
  return pool == MemoryPool::kDevice ? v1::MEMORY_POOL_DEVICE
                                     : v1::MEMORY_POOL_HOST;
}

v1::MemoryComponent MemoryComponentProto(MemoryComponent component) {
  switch (component) {
    case MemoryComponent::kWeights:
      return v1::MEMORY_COMPONENT_WEIGHTS;
    case MemoryComponent::kGradients:
      return v1::MEMORY_COMPONENT_GRADIENTS;
    case MemoryComponent::kOptimizer:
      return v1::MEMORY_COMPONENT_OPTIMIZER;
    case MemoryComponent::kDispatch:
      return v1::MEMORY_COMPONENT_DISPATCH;
    case MemoryComponent::kVocabProjection:
      return v1::MEMORY_COMPONENT_VOCAB_PROJECTION;
    case MemoryComponent::kCheckpoint:
      return v1::MEMORY_COMPONENT_CHECKPOINT;
    case MemoryComponent::kAttention:
      return v1::MEMORY_COMPONENT_ATTENTION;
    case MemoryComponent::kActivations:
      return v1::MEMORY_COMPONENT_ACTIVATIONS;
    case MemoryComponent::kStaging:
      return v1::MEMORY_COMPONENT_STAGING;
    case MemoryComponent::kSnapshot:
      return v1::MEMORY_COMPONENT_SNAPSHOT;
    case MemoryComponent::kOther:
      return v1::MEMORY_COMPONENT_OTHER;
  }
  return v1::MEMORY_COMPONENT_OTHER;
}

}  // namespace plateau::engine
