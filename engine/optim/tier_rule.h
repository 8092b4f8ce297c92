// How the tiered optimizers (tiered_optimizer.h) keep each parameter's
// state, decided by its role and shape alone: shared with the memory
// planner, which sizes the state without building an optimizer.
#ifndef PLATEAU_ENGINE_OPTIM_TIER_RULE_H_
#define PLATEAU_ENGINE_OPTIM_TIER_RULE_H_

#include <cstdint>
#include <vector>

#include "engine/model/parameter_layout.h"
#include "proto/job.pb.h"

namespace plateau::engine {

enum class TieredKind { kSkewAdam, kAdafactor, kLion };
enum class MomentumStorage { kNone, kBfloat16, kFloat32 };

// How one parameter's state is kept.
struct TierRule {
  MomentumStorage momentum = MomentumStorage::kNone;
  // Second moment: factored (a matrix) or exact; Lion keeps neither.
  bool factored = false;
  bool second_moment = true;
};

// The rule of optimizer `kind` (SkewAdam's expert bank keeping
// `expert_momentum`) for a parameter of `role` whose whole tensor has
// `global_shape`.
TierRule TierRuleOf(TieredKind kind, MomentumStorage expert_momentum,
                    ParameterRole role,
                    const std::vector<int64_t>& global_shape);

// `optimizer.kind` of a job spec that names a tiered optimizer (anything
// else: SkewAdam).
TieredKind TieredKindOf(v1::OptimizerKind kind);

// `optimizer.expert_momentum` of a job spec (unspecified: none).
MomentumStorage MomentumStorageOf(v1::ExpertMomentum momentum);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_TIER_RULE_H_
