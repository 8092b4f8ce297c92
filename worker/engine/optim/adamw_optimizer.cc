#include "worker/engine/optim/adamw_optimizer.h"

#include "common/status_macros.h"

namespace plateau::engine {

const char* OptimizerTierOf(ParameterRole role) {
  switch (role) {
    case ParameterRole::kExpert:
      return "expert";
    case ParameterRole::kRouter:
      return "router";
    case ParameterRole::kEmbedding:
    case ParameterRole::kAttention:
    case ParameterRole::kNorm:
    case ParameterRole::kHead:
      return "dense";
  }
  return "dense";
}

AdamWOptimizer::AdamWOptimizer(const AdamWSettings& settings,
                               const ParameterLayout* layout, Tensor* weights,
                               Tensor* gradients, kernels::Ops* ops)
    : settings_(settings),
      layout_(layout),
      weights_(weights),
      gradients_(gradients),
      ops_(ops) {
  for (const ParameterInfo& info : layout->parameters()) {
    const bool decay = info.role != ParameterRole::kNorm;
    if (!segments_.empty() && segments_.back().decay == decay) {
      segments_.back().elements += info.elements;
    } else {
      segments_.push_back({info.offset, info.elements, decay});
    }
  }
}

absl::StatusOr<std::unique_ptr<AdamWOptimizer>> AdamWOptimizer::Create(
    const AdamWSettings& settings, const ParameterLayout* layout,
    Tensor* weights, Tensor* gradients, kernels::Ops* ops,
    AccountedAllocator* allocator) {
  std::unique_ptr<AdamWOptimizer> optimizer(
      new AdamWOptimizer(settings, layout, weights, gradients, ops));
  const int64_t parameters = layout->total_elements();
  for (Tensor* moment :
       {&optimizer->first_moment_, &optimizer->second_moment_}) {
    ASSIGN_OR_RETURN(*moment,
                     Tensor::Create(*allocator, MemoryPool::kDevice,
                                    MemoryComponent::kOptimizer, {parameters}));
    ops->Fill(parameters, 0.0f, moment->f32());
  }
  return optimizer;
}

void AdamWOptimizer::Step(float learning_rate, int64_t step) {
  kernels::AdamWHyperparameters hyper;
  hyper.learning_rate = learning_rate;
  hyper.beta1 = settings_.beta1;
  hyper.beta2 = settings_.beta2;
  hyper.epsilon = settings_.epsilon;
  hyper.step = step;
  hyper.weight_decay = settings_.weight_decay;
  const kernels::AdamWCoefficients with_decay =
      kernels::ComputeAdamWCoefficients(hyper);
  hyper.weight_decay = 0.0f;
  const kernels::AdamWCoefficients without_decay =
      kernels::ComputeAdamWCoefficients(hyper);
  for (const Segment& segment : segments_) {
    ops_->AdamWUpdate(segment.decay ? with_decay : without_decay,
                      segment.elements, weights_->f32() + segment.offset,
                      gradients_->f32() + segment.offset,
                      first_moment_.f32() + segment.offset,
                      second_moment_.f32() + segment.offset);
  }
}

std::vector<OptimizerStateTensor> AdamWOptimizer::StateTensors() {
  std::vector<OptimizerStateTensor> state;
  for (const ParameterInfo& info : layout_->parameters()) {
    // PyTorch's names for the two moments.
    state.push_back({info.name + ".exp_avg", info.shape,
                     first_moment_.f32() + info.offset, info.elements});
    state.push_back({info.name + ".exp_avg_sq", info.shape,
                     second_moment_.f32() + info.offset, info.elements});
  }
  return state;
}

std::map<std::string, int64_t> AdamWOptimizer::StateBytesByTier() const {
  std::map<std::string, int64_t> bytes;
  for (const ParameterInfo& info : layout_->parameters()) {
    // Two float32 moments per parameter.
    bytes[OptimizerTierOf(info.role)] += info.elements * 2 * 4;
  }
  return bytes;
}

}  // namespace plateau::engine
