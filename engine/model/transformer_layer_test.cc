// A layer's output as a boundary: under bf16 the float32 sum rounded once,
// whether the layer sums it in a buffer of its own (keep_saved) or over mid.
#include "engine/model/transformer_layer.h"

#include <random>
#include <vector>

#include "engine/backend.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/model/dispatch_strategy.h"
#include "engine/model/model.h"
#include "engine/model/model_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16.h"

namespace plateau::engine {
namespace {

std::vector<uint16_t> Bits(const Tensor& tensor) {
  return std::vector<uint16_t>(tensor.bf16(),
                               tensor.bf16() + tensor.elements());
}

TEST(TransformerLayerTest, Bf16BoundaryIsTheFloat32SumRoundedOnce) {
  ModelConfig config = TinyModelConfig();
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  const int64_t sequences = 7;
  const int64_t n = sequences * config.seq_len, d = config.d_model;

  std::unique_ptr<Backend> backend =
      Backend::CreateCpu(2, AccountedAllocator::kUnlimited);
  AccountedAllocator& allocator = backend->allocator();
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(config, &backend->ops(), &allocator);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->InitializeWeights(5).ok());
  const LayerParameters<const float> w = LayerParametersAt<const float>(
      (*model)->layout(), 0, (*model)->weights().f32());

  LayerContext context;
  context.config = &config;
  context.shard = ModelShard::Whole(config);
  context.ops = &backend->ops();
  context.allocator = &allocator;
  context.sequences = sequences;
  context.dispatch = &DispatchStrategyFor(config);

  auto create = [&](const BufferSpec& spec) {
    absl::StatusOr<Tensor> tensor = Tensor::Create(allocator, spec);
    EXPECT_TRUE(tensor.ok()) << tensor.status();
    return *std::move(tensor);
  };
  const BufferSpec boundary = LayerBoundaryBuffer(config, sequences);
  const BufferSpec float_sum = ResidualStreamBuffer(config, sequences);
  Tensor x = create(boundary);
  ASSERT_EQ(x.dtype(), DType::kBfloat16);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n * d);
  for (float& value : values) value = normal(rng);
  kernels::cpu::ConvertToBf16(values, absl::MakeSpan(x.bf16(), n * d));

  Tensor sum = create(float_sum);
  ASSERT_EQ(sum.dtype(), DType::kFloat32);
  LayerActivations saved_float;
  ASSERT_TRUE(TransformerLayerForward(context, w, x, &sum,
                                      /*keep_saved=*/true, &saved_float)
                  .ok());
  std::vector<uint16_t> rounded(n * d);
  kernels::cpu::ConvertToBf16(absl::MakeConstSpan(sum.f32(), n * d),
                              absl::MakeSpan(rounded));

  Tensor kept_out = create(boundary);
  LayerActivations kept;
  ASSERT_TRUE(TransformerLayerForward(context, w, x, &kept_out,
                                      /*keep_saved=*/true, &kept)
                  .ok());
  EXPECT_EQ(Bits(kept_out), rounded);
  // Kept for backward, mid is still mid.
  EXPECT_EQ(
      std::vector<float>(kept.mid.f32(), kept.mid.f32() + n * d),
      std::vector<float>(saved_float.mid.f32(), saved_float.mid.f32() + n * d));

  Tensor dropped_out = create(boundary);
  LayerActivations dropped;
  ASSERT_TRUE(TransformerLayerForward(context, w, x, &dropped_out,
                                      /*keep_saved=*/false, &dropped)
                  .ok());
  EXPECT_EQ(Bits(dropped_out), rounded);

  // The block reads a layer's input in the type a boundary has.
  Tensor wrong_input = create(float_sum);
  LayerActivations refused;
  const absl::StatusOr<RouterLosses> wrong =
      TransformerLayerForward(context, w, wrong_input, &dropped_out,
                              /*keep_saved=*/false, &refused);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace plateau::engine
