#include "engine/model/activation_policy.h"

#include "absl/status/status.h"

namespace plateau::engine {

absl::StatusOr<ActivationPolicy> ActivationPolicyOf(const ModelConfig& config) {
  if (!config.activation_checkpointing) {
    if (config.offload_checkpoints) {
      return absl::InvalidArgumentError(
          "checkpoint offload (SCO) needs activation checkpointing");
    }
    return ActivationPolicy::kKeep;
  }
  return config.offload_checkpoints ? ActivationPolicy::kRecomputeOffloaded
                                    : ActivationPolicy::kRecompute;
}

}  // namespace plateau::engine
