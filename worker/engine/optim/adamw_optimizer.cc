#include "worker/engine/optim/adamw_optimizer.h"

#include <algorithm>

#include "common/status_macros.h"

namespace plateau::engine {
namespace {

// PyTorch's names for AdamW's moments.
constexpr const char* kStateSuffixes[] = {".exp_avg", ".exp_avg_sq"};
// Two float32 moments per element.
constexpr int64_t kMomentBytesPerElement = 2 * sizeof(float);

}  // namespace

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
      ops_(ops) {}

absl::StatusOr<std::unique_ptr<AdamWOptimizer>> AdamWOptimizer::Create(
    const AdamWSettings& settings, const ParameterLayout* layout,
    std::vector<OwnedRange> owned, Tensor* weights, Tensor* gradients,
    kernels::Ops* ops, AccountedAllocator* allocator) {
  std::unique_ptr<AdamWOptimizer> optimizer(
      new AdamWOptimizer(settings, layout, weights, gradients, ops));
  if (owned.empty()) owned.push_back({0, layout->total_elements()});
  int64_t state_elements = 0;
  for (const OwnedRange& range : owned) {
    for (const ParameterInfo& info : layout->parameters()) {
      const int64_t begin = std::max(range.begin, info.offset);
      const int64_t end = std::min(range.end, info.offset + info.elements);
      if (begin >= end) continue;
      optimizer->segments_.push_back({&info, begin, state_elements, end - begin,
                                      info.role != ParameterRole::kNorm});
      state_elements += end - begin;
    }
  }
  for (Tensor* moment :
       {&optimizer->first_moment_, &optimizer->second_moment_}) {
    ASSIGN_OR_RETURN(
        *moment, Tensor::Create(*allocator, MemoryPool::kDevice,
                                MemoryComponent::kOptimizer, {state_elements}));
    ops->Fill(state_elements, 0.0f, moment->f32());
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
  // Segments are contiguous in both the buffers and the moments unless a
  // range boundary or the decay changes: merge runs into single passes.
  size_t i = 0;
  while (i < segments_.size()) {
    const Segment& first = segments_[i];
    int64_t elements = first.elements;
    size_t j = i + 1;
    while (j < segments_.size() && segments_[j].decay == first.decay &&
           segments_[j].offset == first.offset + elements &&
           segments_[j].state_offset == first.state_offset + elements) {
      elements += segments_[j].elements;
      ++j;
    }
    ops_->AdamWUpdate(first.decay ? with_decay : without_decay, elements,
                      weights_->f32() + first.offset,
                      gradients_->f32() + first.offset,
                      first_moment_.f32() + first.state_offset,
                      second_moment_.f32() + first.state_offset);
    i = j;
  }
}

TensorShapes AdamWStateShapes(const ModelConfig& config) {
  TensorShapes shapes;
  const ParameterLayout whole_model(config);
  for (const ParameterInfo& info : whole_model.parameters()) {
    for (const char* suffix : kStateSuffixes) {
      shapes[info.name + suffix] = info.global_shape;
    }
  }
  return shapes;
}

std::vector<TensorPiece> AdamWOptimizer::StatePieces() {
  std::vector<TensorPiece> pieces;
  for (const auto& [moment, suffix] :
       {std::pair<Tensor*, const char*>{&first_moment_, kStateSuffixes[0]},
        std::pair<Tensor*, const char*>{&second_moment_, kStateSuffixes[1]}}) {
    for (const Segment& segment : segments_) {
      const ParameterInfo& info = *segment.parameter;
      pieces.push_back({info.name + suffix, info.global_shape,
                        info.global_offset + (segment.offset - info.offset),
                        segment.elements,
                        moment->f32() + segment.state_offset});
    }
  }
  return pieces;
}

std::map<std::string, int64_t> AdamWOptimizer::StateBytesByTier() const {
  std::map<std::string, int64_t> bytes;
  for (const Segment& segment : segments_) {
    bytes[OptimizerTierOf(segment.parameter->role)] +=
        segment.elements * kMomentBytesPerElement;
  }
  return bytes;
}

}  // namespace plateau::engine
