// What a micro-batch's forward keeps of each layer for its backward, chosen
// once per model from the config (docs/ARCHITECTURE.md section 2):
// - keep: every layer's activations;
// - recompute (activation checkpointing): only each layer's input (component
//   `checkpoint`), the layer recomputed in backward;
// - recompute with offload (SCO): those inputs wait in the host pool
//   between forward and backward, copied while layers compute.
// All three give bitwise the same loss and gradients.
#ifndef PLATEAU_ENGINE_MODEL_ACTIVATION_POLICY_H_
#define PLATEAU_ENGINE_MODEL_ACTIVATION_POLICY_H_

#include "absl/status/statusor.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

enum class ActivationPolicy { kKeep, kRecompute, kRecomputeOffloaded };

// INVALID_ARGUMENT for checkpoint offload without activation checkpointing.
absl::StatusOr<ActivationPolicy> ActivationPolicyOf(const ModelConfig& config);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_ACTIVATION_POLICY_H_
