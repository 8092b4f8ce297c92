#include "engine/optim/tier_rule.h"

namespace plateau::engine {

TieredKind TieredKindOf(v1::OptimizerKind kind) {
  switch (kind) {
    case v1::OPTIMIZER_KIND_ADAFACTOR:
      return TieredKind::kAdafactor;
    case v1::OPTIMIZER_KIND_LION:
      return TieredKind::kLion;
    default:
      return TieredKind::kSkewAdam;
  }
}

MomentumStorage MomentumStorageOf(v1::ExpertMomentum momentum) {
  switch (momentum) {
    case v1::EXPERT_MOMENTUM_FP32:
      return MomentumStorage::kFloat32;
    case v1::EXPERT_MOMENTUM_BF16:
      return MomentumStorage::kBfloat16;
    default:
      return MomentumStorage::kNone;
  }
}

TierRule TierRuleOf(TieredKind kind, MomentumStorage expert_momentum,
                    ParameterRole role,
                    const std::vector<int64_t>& global_shape) {
  const bool matrix = global_shape.size() >= 2;
  switch (kind) {
    case TieredKind::kLion:
      return {MomentumStorage::kFloat32, /*factored=*/false,
              /*second_moment=*/false};
    case TieredKind::kAdafactor:
      return {MomentumStorage::kNone, matrix, true};
    case TieredKind::kSkewAdam:
      break;
  }
  switch (role) {
    case ParameterRole::kExpert:
      return {expert_momentum, true, true};
    case ParameterRole::kRouter:
    case ParameterRole::kExpertBias:  // never asked: no optimizer updates it
      return {MomentumStorage::kFloat32, false, true};
    case ParameterRole::kEmbedding:
    case ParameterRole::kAttention:
    case ParameterRole::kSharedExpert:
    case ParameterRole::kNorm:
    case ParameterRole::kHead:
      break;
  }
  return {MomentumStorage::kFloat32, matrix, true};
}

}  // namespace plateau::engine
