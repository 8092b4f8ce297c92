// The experts under bf16: gate, up and the output written rounded by their
// products (GemmArgs::c_bf16), hidden made from the rounded gate and up,
// and backward widening them a piece at a time, give bitwise what the whole
// products and elementwise ops give, with the staging whole or cutting the
// products into tiles.
#include "engine/model/experts.h"

#include <vector>

#include "engine/backend.h"
#include "engine/model/bf16_testing.h"
#include "engine/model/linear.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16.h"

namespace plateau::engine {
namespace {

using testing::Bf16Bits;
using testing::BitsOf;
using testing::RandomFloats;
using testing::RoundedToBf16;
using testing::WidenedFromBf16;

std::vector<float> Widened(const Bf16Bits& bits) {
  return WidenedFromBf16(bits.data(), static_cast<int64_t>(bits.size()));
}

class ExpertsTest : public ::testing::Test {
 protected:
  ExpertsTest() {
    config_.matmul_precision = kernels::GemmPrecision::kBf16;
    // Segments of uneven sizes, one empty and some longer than a piece of
    // a product (kernels/cpu/thread_pool.h PiecesOfProduct), from two
    // sources.
    const std::vector<int64_t> sizes = {700, 0, 1500, 31, 333, 900};
    for (size_t i = 0; i < sizes.size(); ++i) {
      segments_.push_back({static_cast<int>(i / config_.experts),
                           static_cast<int64_t>(i) % config_.experts, rows_,
                           sizes[i]});
      rows_ += sizes[i];
    }
    ops().SetMatmulStagingBytes(MatmulStagingBytes(config_));
    context_.config = &config_;
    context_.ops = &ops();
    context_.allocator = &backend_->allocator();
    context_.sequences = 1;
  }

  kernels::Ops& ops() { return backend_->ops(); }

  // The experts' input rows, in bf16 as dispatched.
  Tensor Input() {
    absl::StatusOr<Tensor> input = Tensor::Create(
        backend_->allocator(), ExpertInputRowsBuffer(config_, rows_));
    EXPECT_TRUE(input.ok()) << input.status();
    EXPECT_EQ(input->dtype(), DType::kBfloat16);
    kernels::cpu::ConvertToBf16(
        RandomFloats(rows_ * config_.d_model, 4, 0.3f),
        absl::MakeSpan(input->bf16(), rows_ * config_.d_model));
    return *std::move(input);
  }

  // out (rows, out_features) = in . matrix_e^T for every segment, in one
  // product each: the whole products the pieces must reproduce.
  std::vector<float> WholeProducts(LinearOperand in, int64_t in_features,
                                   const std::vector<float>& matrices,
                                   int64_t out_features) {
    std::vector<float> out(rows_ * out_features);
    for (const ExpertSegment& segment : segments_) {
      if (segment.rows == 0) continue;
      ops().Gemm(LinearForwardArgs(
          segment.rows, in_features, out_features,
          in.At(segment.first_row * in_features),
          FloatOperand(matrices.data() +
                       segment.local_expert * out_features * in_features),
          out.data() + segment.first_row * out_features,
          /*accumulate=*/false, config_.matmul_precision));
    }
    return out;
  }

  ModelConfig config_ = TinyModelConfig();
  std::vector<ExpertSegment> segments_;
  int64_t rows_ = 0;
  std::unique_ptr<Backend> backend_ =
      Backend::CreateCpu(2, AccountedAllocator::kUnlimited);
  LayerContext context_;
  const std::vector<float> w1_ = RandomFloats(
      config_.experts * config_.ffn_hidden * config_.d_model, 1, 0.3f);
  const std::vector<float> w3_ = RandomFloats(w1_.size(), 2, 0.3f);
  const std::vector<float> w2_ = RandomFloats(w1_.size(), 3, 0.3f);
  const ExpertBank<const float> bank_{
      {FloatOperand(w1_.data()), FloatOperand(w3_.data()),
       FloatOperand(w2_.data())},
      {}};
};

// The forward's products write gate, up and the output rounded: the whole
// products rounded once, with the staging the model gets (the products'
// float32 values in tiles of it) and with one far smaller (many tiles).
TEST_F(ExpertsTest, Bf16ForwardGivesTheWholeProductsRoundedOnce) {
  const int64_t d = config_.d_model, f = config_.ffn_hidden;
  const Tensor input = Input();
  for (const int64_t staging_bytes :
       {MatmulStagingBytes(config_), int64_t{64} << 10}) {
    SCOPED_TRACE(::testing::Message() << "staging " << staging_bytes);
    ops().SetMatmulStagingBytes(staging_bytes);
    ExpertActivations saved;
    absl::StatusOr<Tensor> output =
        ExpertsForward(context_, bank_, segments_, input, &saved);
    ASSERT_TRUE(output.ok()) << output.status();
    ASSERT_EQ(saved.gate.dtype(), DType::kBfloat16);
    ASSERT_EQ(saved.up.dtype(), DType::kBfloat16);
    ASSERT_EQ(output->dtype(), DType::kBfloat16);

    ops().SetMatmulStagingBytes(MatmulStagingBytes(config_));
    const Bf16Bits gate =
        RoundedToBf16(WholeProducts(RowsOf(input), d, w1_, f));
    const Bf16Bits up = RoundedToBf16(WholeProducts(RowsOf(input), d, w3_, f));
    EXPECT_EQ(BitsOf(saved.gate), gate);
    EXPECT_EQ(BitsOf(saved.up), up);
    Bf16Bits hidden(rows_ * f);
    ops().SwiGluForwardToBf16(rows_ * f, Widened(gate).data(),
                              Widened(up).data(), hidden.data());
    EXPECT_EQ(BitsOf(saved.hidden), hidden);
    EXPECT_EQ(BitsOf(*output),
              RoundedToBf16(WholeProducts(RowsOf(saved.hidden), f, w2_, d)));
  }
}

// Backward from the forward's rounded gate and up gives what the whole
// products and elementwise ops give, the input gradients rounded once.
TEST_F(ExpertsTest, Bf16BackwardGivesTheWholeProducts) {
  const int64_t d = config_.d_model, f = config_.ffn_hidden;
  absl::StatusOr<Tensor> input = Input();
  ExpertActivations saved;
  absl::StatusOr<Tensor> output =
      ExpertsForward(context_, bank_, segments_, *input, &saved);
  ASSERT_TRUE(output.ok()) << output.status();
  const Bf16Bits gate = BitsOf(saved.gate);
  const Bf16Bits up = BitsOf(saved.up);

  // Backward: SwiGLU's on the widened gate and up, then the products. Each
  // row's d_input depends on that row alone, so it is bitwise the whole
  // computation's.
  const std::vector<float> d_output = RandomFloats(rows_ * d, 5, 0.3f);
  std::vector<float> d_hidden(rows_ * f), d_gate(rows_ * f), d_up(rows_ * f);
  std::vector<float> expected_d_input(rows_ * d);
  for (const ExpertSegment& segment : segments_) {
    if (segment.rows == 0) continue;
    ops().Gemm(LinearInputGradArgs(
        segment.rows, f, d, d_output.data() + segment.first_row * d,
        FloatOperand(w2_.data() + segment.local_expert * d * f),
        d_hidden.data() + segment.first_row * f, /*accumulate=*/false,
        config_.matmul_precision));
  }
  ops().SwiGluBackward(rows_ * f, Widened(gate).data(), Widened(up).data(),
                       d_hidden.data(), d_gate.data(), d_up.data());
  for (const ExpertSegment& segment : segments_) {
    if (segment.rows == 0) continue;
    float* dx = expected_d_input.data() + segment.first_row * d;
    const int64_t e = segment.local_expert;
    ops().Gemm(LinearInputGradArgs(
        segment.rows, d, f, d_gate.data() + segment.first_row * f,
        FloatOperand(w1_.data() + e * f * d), dx, /*accumulate=*/false,
        config_.matmul_precision));
    ops().Gemm(LinearInputGradArgs(
        segment.rows, d, f, d_up.data() + segment.first_row * f,
        FloatOperand(w3_.data() + e * f * d), dx, /*accumulate=*/true,
        config_.matmul_precision));
  }

  // And w1's and w3's weight gradients, which read d_gate and d_up
  // transposed, from float32 as the reference's products round them.
  const std::vector<uint16_t> input_bits(input->bf16(),
                                         input->bf16() + rows_ * d);
  std::vector<float> expected_grad_w1(w1_.size()), expected_grad_w3(w3_.size());
  for (const ExpertSegment& segment : segments_) {
    if (segment.rows == 0) continue;
    const int64_t e = segment.local_expert;
    const LinearOperand x{nullptr, input_bits.data() + segment.first_row * d};
    ops().Gemm(LinearWeightGradArgs(
        segment.rows, d, f, FloatOperand(d_gate.data() + segment.first_row * f),
        x, expected_grad_w1.data() + e * f * d, config_.matmul_precision));
    ops().Gemm(LinearWeightGradArgs(
        segment.rows, d, f, FloatOperand(d_up.data() + segment.first_row * f),
        x, expected_grad_w3.data() + e * f * d, config_.matmul_precision));
  }

  std::vector<float> grad_w1(w1_.size()), grad_w3(w3_.size()),
      grad_w2(w2_.size());
  const ExpertBank<float> grads{
      {grad_w1.data(), grad_w3.data(), grad_w2.data()}, {}};
  // d_output as the experts receive it, rounded to bf16: the products
  // round the float32 one so, bitwise.
  absl::StatusOr<Tensor> d_out_tensor = Tensor::Create(
      backend_->allocator(), ExpertOutputGradientRowsBuffer(config_, rows_));
  ASSERT_TRUE(d_out_tensor.ok()) << d_out_tensor.status();
  ASSERT_EQ(d_out_tensor->dtype(), DType::kBfloat16);
  kernels::cpu::ConvertToBf16(d_output,
                              absl::MakeSpan(d_out_tensor->bf16(), rows_ * d));
  absl::StatusOr<Tensor> d_input =
      ExpertsBackward(context_, bank_, grads, segments_, *std::move(input),
                      std::move(saved), *std::move(d_out_tensor));
  ASSERT_TRUE(d_input.ok()) << d_input.status();
  // d_input returned rounded: each value its float32 sum rounded once.
  ASSERT_EQ(d_input->dtype(), DType::kBfloat16);
  EXPECT_EQ(BitsOf(*d_input), RoundedToBf16(expected_d_input));
  EXPECT_EQ(grad_w1, expected_grad_w1);
  EXPECT_EQ(grad_w3, expected_grad_w3);
}

}  // namespace
}  // namespace plateau::engine
