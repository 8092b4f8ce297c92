// The head's logits under bf16: written rounded by their product
// (GemmArgs::c_bf16), they are bitwise the float32 product rounded once,
// whether the staging holds the product whole or in tiles; their
// gradient, stored in bf16 in their place, gives the backward's products
// bitwise what the float32 gradient gives (a bf16 product rounds it so).
#include "engine/model/logits.h"

#include <vector>

#include "engine/backend.h"
#include "engine/model/bf16_testing.h"
#include "engine/model/output_head_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using testing::Bf16Bits;
using testing::RandomFloats;
using testing::RoundedToBf16;
using testing::WidenedFromBf16;

class LogitsTest : public ::testing::TestWithParam<bool> {
 protected:
  // Rows and columns that fit no tile evenly.
  static constexpr int64_t kTokens = 589;
  static constexpr int64_t kColumns = 301;

  LogitsTest() {
    if (bf16()) config_.matmul_precision = kernels::GemmPrecision::kBf16;
    config_.d_model = 64;
    ops().SetMatmulStagingBytes(MatmulStagingBytes(config_));
    context_.config = &config_;
    context_.ops = &ops();
    context_.allocator = &backend_->allocator();
    context_.sequences = 1;
  }

  bool bf16() const { return GetParam(); }
  kernels::Ops& ops() { return backend_->ops(); }
  Tensor Allocate(const BufferSpec& spec) {
    absl::StatusOr<Tensor> tensor = Tensor::Create(backend_->allocator(), spec);
    EXPECT_TRUE(tensor.ok()) << tensor.status();
    return *std::move(tensor);
  }

  ModelConfig config_ = TinyModelConfig();
  std::unique_ptr<Backend> backend_ =
      Backend::CreateCpu(2, AccountedAllocator::kUnlimited);
  LayerContext context_;
};

TEST_P(LogitsTest, TheyAreTheFloat32ProductRoundedOnce) {
  const int64_t d = config_.d_model;
  const std::vector<float> hidden = RandomFloats(kTokens * d, 1, 1.0f);
  const std::vector<float> weights = RandomFloats(kColumns * d, 2, 0.3f);
  std::vector<float> whole(kTokens * kColumns);
  ops().Gemm(LinearForwardArgs(kTokens, d, kColumns,
                               FloatOperand(hidden.data()),
                               FloatOperand(weights.data()), whole.data(),
                               /*accumulate=*/false, config_.matmul_precision));

  for (const int64_t staging_bytes :
       {MatmulStagingBytes(config_), int64_t{16} << 10}) {
    SCOPED_TRACE(::testing::Message() << "staging " << staging_bytes);
    ops().SetMatmulStagingBytes(staging_bytes);
    Tensor logits = Allocate(LogitsBuffer(config_, kTokens, kColumns));
    ProjectLogits(context_, kTokens, kColumns, FloatOperand(hidden.data()),
                  FloatOperand(weights.data()), logits);
    if (!bf16()) {
      EXPECT_EQ(std::vector<float>(logits.f32(), logits.f32() + whole.size()),
                whole);
      continue;
    }
    ASSERT_EQ(logits.dtype(), DType::kBfloat16);
    EXPECT_EQ(Bf16Bits(logits.bf16(), logits.bf16() + whole.size()),
              RoundedToBf16(whole));
  }
}

TEST_P(LogitsTest, TheGradientInPlaceGivesTheProductsOfTheFloat32One) {
  const int64_t d = config_.d_model;
  const std::vector<float> hidden = RandomFloats(kTokens * d, 3, 1.0f);
  const std::vector<float> weights = RandomFloats(kColumns * d, 4, 0.3f);
  std::vector<int32_t> targets(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) targets[t] = (t * 37) % kColumns;
  Tensor logits = Allocate(LogitsBuffer(config_, kTokens, kColumns));
  ProjectLogits(context_, kTokens, kColumns, FloatOperand(hidden.data()),
                FloatOperand(weights.data()), logits);

  // The float32 ops on the stored values: the reference.
  std::vector<float> values =
      bf16()
          ? WidenedFromBf16(logits.bf16(), kTokens * kColumns)
          : std::vector<float>(logits.f32(), logits.f32() + kTokens * kColumns);
  std::vector<float> losses(kTokens), logsumexp(kTokens);
  ops().CrossEntropyForward(kTokens, kColumns, values.data(), targets.data(),
                            losses.data(), logsumexp.data());
  std::vector<float> stored_losses(kTokens), stored_logsumexp(kTokens);
  LogitsCrossEntropyForward(ops(), kTokens, kColumns, logits, targets.data(),
                            stored_losses.data(), stored_logsumexp.data());
  EXPECT_EQ(stored_losses, losses);
  EXPECT_EQ(stored_logsumexp, logsumexp);

  const float scale = 1.0f / kTokens;
  ops().CrossEntropyBackward(kTokens, kColumns, 0, targets.data(),
                             logsumexp.data(), scale, values.data());
  LogitsCrossEntropyBackward(ops(), kTokens, kColumns, 0, targets.data(),
                             logsumexp.data(), scale, logits);
  std::vector<float> d_hidden(kTokens * d), d_weights(kColumns * d, 0.0f);
  ops().Gemm(LinearInputGradArgs(kTokens, d, kColumns, values.data(),
                                 FloatOperand(weights.data()), d_hidden.data(),
                                 /*accumulate=*/false,
                                 config_.matmul_precision));
  ops().Gemm(LinearWeightGradArgs(kTokens, d, kColumns, values.data(),
                                  FloatOperand(hidden.data()), d_weights.data(),
                                  config_.matmul_precision));
  std::vector<float> stored_d_hidden(kTokens * d),
      stored_d_weights(kColumns * d, 0.0f);
  ops().Gemm(
      LinearInputGradArgs(kTokens, d, kColumns, RowsOf(logits),
                          FloatOperand(weights.data()), stored_d_hidden.data(),
                          /*accumulate=*/false, config_.matmul_precision));
  ops().Gemm(LinearWeightGradArgs(
      kTokens, d, kColumns, RowsOf(logits), FloatOperand(hidden.data()),
      stored_d_weights.data(), config_.matmul_precision));
  EXPECT_EQ(stored_d_hidden, d_hidden);
  EXPECT_EQ(stored_d_weights, d_weights);
}

INSTANTIATE_TEST_SUITE_P(Precisions, LogitsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "bf16" : "fp32";
                         });

}  // namespace
}  // namespace plateau::engine
