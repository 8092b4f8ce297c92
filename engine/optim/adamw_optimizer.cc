#include "engine/optim/adamw_optimizer.h"

#include <algorithm>
#include <cstdint>

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
    case ParameterRole::kExpertBias:
      return "router";
    case ParameterRole::kEmbedding:
    case ParameterRole::kAttention:
    case ParameterRole::kSharedExpert:
    case ParameterRole::kNorm:
    case ParameterRole::kHead:
      return "dense";
  }
  return "dense";
}

AdamWOptimizer::AdamWOptimizer(const AdamWSettings& settings,
                               const ParameterLayout* layout,
                               const SplitBuffers& weights,
                               const SplitBuffers& gradients, kernels::Ops* ops)
    : settings_(settings),
      layout_(layout),
      weights_(weights),
      gradients_(gradients),
      ops_(ops) {}

absl::StatusOr<std::unique_ptr<AdamWOptimizer>> AdamWOptimizer::Create(
    const AdamWSettings& settings, const ParameterLayout* layout,
    std::vector<OwnedRange> owned, const SplitBuffers& weights,
    const SplitBuffers& gradients, kernels::Ops* ops,
    AccountedAllocator* allocator) {
  if (settings.offload != OptimizerOffload::kNone &&
      (settings.bucket_elements < 1 || settings.host_threads < 1)) {
    return absl::InvalidArgumentError(
        "optimizer offload needs a bucket and host threads");
  }
  if (layout->bf16_weight_storage() &&
      settings.offload == OptimizerOffload::kNone) {
    return absl::InvalidArgumentError(
        "bf16 weight storage needs an offloaded optimizer, whose masters "
        "keep the float32 weights");
  }
  std::unique_ptr<AdamWOptimizer> optimizer(
      new AdamWOptimizer(settings, layout, weights, gradients, ops));
  optimizer->allocator_ = allocator;
  if (owned.empty()) owned.push_back({0, layout->total_elements()});
  int64_t& state_elements = optimizer->state_elements_;
  for (const OwnedRange& range : owned) {
    for (const ParameterInfo& info : layout->parameters()) {
      if (!TrainedByOptimizer(info)) continue;
      const int64_t begin = std::max(range.begin, info.offset);
      const int64_t end = std::min(range.end, info.offset + info.elements);
      if (begin >= end) continue;
      optimizer->segments_.push_back({&info, begin, state_elements, end - begin,
                                      info.role != ParameterRole::kNorm});
      state_elements += end - begin;
    }
  }
  const AdamWState state = AdamWState::For(*layout, owned, settings.offload,
                                           settings.bucket_elements);
  const bool offloaded = settings.offload != OptimizerOffload::kNone;
  if (state.state_elements != state_elements ||
      (offloaded && state.staging.elements() <
                        std::max<int64_t>(1, optimizer->StagingElements()))) {
    return absl::InternalError(
        "AdamW's state does not match its footprint (optimizer_footprint.h)");
  }
  if (!offloaded) {
    for (Tensor* moment :
         {&optimizer->first_moment_, &optimizer->second_moment_}) {
      ASSIGN_OR_RETURN(*moment, Tensor::Create(*allocator, state.first_moment));
      ops->Fill(state_elements, 0.0f, moment->f32());
    }
    return optimizer;
  }
  for (Tensor* moment :
       {&optimizer->first_moment_, &optimizer->second_moment_}) {
    ASSIGN_OR_RETURN(*moment, Tensor::Create(*allocator, state.first_moment));
    std::fill_n(moment->f32(), state_elements, 0.0f);
  }
  ASSIGN_OR_RETURN(optimizer->master_weights_,
                   Tensor::Create(*allocator, state.master_weights));
  ASSIGN_OR_RETURN(optimizer->staging_,
                   Tensor::Create(*allocator, state.staging));
  optimizer->host_ops_ =
      std::make_unique<kernels::cpu::CpuOps>(settings.host_threads);
  ASSIGN_OR_RETURN(optimizer->weights_up_,
                   MasterCopies::Create(weights, ops,
                                        optimizer->host_ops_.get(), allocator));
  ASSIGN_OR_RETURN(optimizer->gradients_down_,
                   GradientCopies::Create(gradients, ops, allocator));
  optimizer->CopyMastersFromWeights();
  return optimizer;
}

std::vector<AdamWOptimizer::Segment> AdamWOptimizer::Runs(
    int64_t most_elements) const {
  std::vector<Segment> runs;
  for (const Segment& segment : segments_) {
    if (!runs.empty()) {
      Segment& last = runs.back();
      if (last.decay == segment.decay &&
          last.offset + last.elements == segment.offset &&
          last.state_offset + last.elements == segment.state_offset) {
        last.elements += segment.elements;
        continue;
      }
    }
    runs.push_back(segment);
  }
  std::vector<Segment> cut;
  most_elements = std::max<int64_t>(1, most_elements);
  for (const Segment& run : runs) {
    for (int64_t done = 0; done < run.elements; done += most_elements) {
      Segment piece = run;
      piece.offset += done;
      piece.state_offset += done;
      piece.elements = std::min(most_elements, run.elements - done);
      cut.push_back(piece);
    }
  }
  return cut;
}

absl::Status AdamWOptimizer::Step(float learning_rate, int64_t step) {
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
  switch (settings_.offload) {
    case OptimizerOffload::kSerial:
      StepSerial(with_decay, without_decay);
      return absl::OkStatus();
    case OptimizerOffload::kStream:
      StepStream(with_decay, without_decay);
      return absl::OkStatus();
    case OptimizerOffload::kNone:
      break;
  }
  for (const Segment& run : Runs(state_elements_)) {
    ops_->AdamWUpdate(run.decay ? with_decay : without_decay, run.elements,
                      weights_.Float32At(run.offset),
                      gradients_.Float32At(run.offset),
                      first_moment_.f32() + run.state_offset,
                      second_moment_.f32() + run.state_offset);
  }
  return absl::OkStatus();
}

void AdamWOptimizer::CopyMastersFromWeights() {
  for (const Segment& run : Runs(state_elements_)) {
    weights_up_->Fetch(run.offset, run.elements,
                       master_weights_.f32() + run.state_offset);
  }
}

TensorShapes AdamWStateShapes(const ModelConfig& config) {
  TensorShapes shapes;
  const ParameterLayout whole_model(config);
  for (const ParameterInfo& info : whole_model.parameters()) {
    if (!TrainedByOptimizer(info)) continue;
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
                        segment.elements, moment->f32() + segment.state_offset,
                        moment->pool()});
    }
  }
  return pieces;
}

std::vector<TensorPiece> AdamWOptimizer::MasterPieces() {
  std::vector<TensorPiece> pieces;
  if (master_weights_.empty()) return pieces;
  for (const Segment& segment : segments_) {
    const ParameterInfo& info = *segment.parameter;
    pieces.push_back(
        {info.name, info.global_shape,
         info.global_offset + (segment.offset - info.offset), segment.elements,
         master_weights_.f32() + segment.state_offset, master_weights_.pool()});
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
