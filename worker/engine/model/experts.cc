#include "worker/engine/model/experts.h"

#include "common/status_macros.h"
#include "worker/engine/model/linear.h"

namespace plateau::engine {

absl::StatusOr<Tensor> ExpertsForward(
    const LayerContext& context, const ExpertParameters<const float>& w,
    const std::vector<int64_t>& expert_offsets, const Tensor& input,
    ExpertActivations* saved) {
  const ModelConfig& config = *context.config;
  const int64_t rows = input.dim(0);
  const int64_t d = config.d_model;
  const int64_t f = config.ffn_hidden;
  ASSIGN_OR_RETURN(saved->gate,
                   context.Allocate(MemoryComponent::kDispatch, {rows, f}));
  ASSIGN_OR_RETURN(saved->up,
                   context.Allocate(MemoryComponent::kDispatch, {rows, f}));
  ASSIGN_OR_RETURN(saved->hidden,
                   context.Allocate(MemoryComponent::kDispatch, {rows, f}));
  ASSIGN_OR_RETURN(Tensor output,
                   context.Allocate(MemoryComponent::kDispatch, {rows, d}));

  // gate_e = X_e w1_e^T, up_e = X_e w3_e^T      (n_e, F) each
  std::vector<kernels::GemmArgs> products;
  for (int64_t e = 0; e < config.experts; ++e) {
    const int64_t first = expert_offsets[e];
    const int64_t count = expert_offsets[e + 1] - first;
    const float* x = input.f32() + first * d;
    products.push_back(LinearForwardArgs(count, d, f, x, w.w1 + e * f * d,
                                         saved->gate.f32() + first * f,
                                         /*accumulate=*/false));
    products.push_back(LinearForwardArgs(count, d, f, x, w.w3 + e * f * d,
                                         saved->up.f32() + first * f,
                                         /*accumulate=*/false));
  }
  context.ops->GroupedGemm(products);
  context.ops->SwiGluForward(rows * f, saved->gate.f32(), saved->up.f32(),
                             saved->hidden.f32());
  // out_e = hidden_e w2_e^T      (n_e, D)
  products.clear();
  for (int64_t e = 0; e < config.experts; ++e) {
    const int64_t first = expert_offsets[e];
    const int64_t count = expert_offsets[e + 1] - first;
    products.push_back(LinearForwardArgs(
        count, f, d, saved->hidden.f32() + first * f, w.w2 + e * d * f,
        output.f32() + first * d, /*accumulate=*/false));
  }
  context.ops->GroupedGemm(products);
  return output;
}

absl::StatusOr<Tensor> ExpertsBackward(
    const LayerContext& context, const ExpertParameters<const float>& w,
    const ExpertParameters<float>& grads,
    const std::vector<int64_t>& expert_offsets, Tensor input,
    ExpertActivations saved, Tensor d_output) {
  const ModelConfig& config = *context.config;
  const int64_t rows = input.dim(0);
  const int64_t d = config.d_model;
  const int64_t f = config.ffn_hidden;

  // Through w2: d_hidden_e = d_out_e w2_e; d_w2_e += d_out_e^T hidden_e.
  ASSIGN_OR_RETURN(Tensor d_hidden,
                   context.Allocate(MemoryComponent::kDispatch, {rows, f}));
  std::vector<kernels::GemmArgs> products;
  for (int64_t e = 0; e < config.experts; ++e) {
    const int64_t first = expert_offsets[e];
    const int64_t count = expert_offsets[e + 1] - first;
    const float* dy = d_output.f32() + first * d;
    products.push_back(LinearInputGradArgs(count, f, d, dy, w.w2 + e * d * f,
                                           d_hidden.f32() + first * f,
                                           /*accumulate=*/false));
    products.push_back(LinearWeightGradArgs(
        count, f, d, dy, saved.hidden.f32() + first * f, grads.w2 + e * d * f));
  }
  context.ops->GroupedGemm(products);
  d_output.Reset();
  saved.hidden.Reset();

  ASSIGN_OR_RETURN(Tensor d_gate,
                   context.Allocate(MemoryComponent::kDispatch, {rows, f}));
  ASSIGN_OR_RETURN(Tensor d_up,
                   context.Allocate(MemoryComponent::kDispatch, {rows, f}));
  context.ops->SwiGluBackward(rows * f, saved.gate.f32(), saved.up.f32(),
                              d_hidden.f32(), d_gate.f32(), d_up.f32());
  d_hidden.Reset();
  saved.gate.Reset();
  saved.up.Reset();

  // Through w1 and w3: d_x_e = d_gate_e w1_e + d_up_e w3_e, and the weight
  // gradients. The two input-gradient products write the same rows, so the
  // second (accumulating) one runs in a later batch.
  ASSIGN_OR_RETURN(Tensor d_input,
                   context.Allocate(MemoryComponent::kDispatch, {rows, d}));
  products.clear();
  std::vector<kernels::GemmArgs> accumulating;
  for (int64_t e = 0; e < config.experts; ++e) {
    const int64_t first = expert_offsets[e];
    const int64_t count = expert_offsets[e + 1] - first;
    const float* x = input.f32() + first * d;
    const float* dg = d_gate.f32() + first * f;
    const float* du = d_up.f32() + first * f;
    float* dx = d_input.f32() + first * d;
    products.push_back(LinearInputGradArgs(count, d, f, dg, w.w1 + e * f * d,
                                           dx, /*accumulate=*/false));
    products.push_back(
        LinearWeightGradArgs(count, d, f, dg, x, grads.w1 + e * f * d));
    products.push_back(
        LinearWeightGradArgs(count, d, f, du, x, grads.w3 + e * f * d));
    accumulating.push_back(LinearInputGradArgs(
        count, d, f, du, w.w3 + e * f * d, dx, /*accumulate=*/true));
  }
  context.ops->GroupedGemm(products);
  context.ops->GroupedGemm(accumulating);
  return d_input;
}

}  // namespace plateau::engine
