// The attention block's bf16 q, k, v: made a piece of kQkvProductRows rows
// at a time, each piece rotated from its own rows' positions and rounded
// once, they are the whole product's, rotated and rounded. With grouped-query
// attention too, whose rows are narrower (fewer key and value heads). And
// its bf16 backward, made a piece of the heads at a time, is the whole's.
#include "engine/model/attention_block.h"

#include <algorithm>
#include <vector>

#include "engine/memory/accounted_allocator.h"
#include "engine/memory/memory_source.h"
#include "engine/model/attention_footprint.h"
#include "engine/model/bf16_testing.h"
#include "engine/model/linear.h"
#include "engine/model/model_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

using testing::Bf16Bits;
using testing::BitsOf;
using testing::RandomFloats;
using testing::RoundedToBf16;
using testing::WidenedFromBf16;

AccountedAllocator::Options HostOptions(HostMemorySource* source) {
  AccountedAllocator::Options options;
  options.device_source = source;
  options.host_source = source;
  return options;
}

// One attention block under bf16 products on the CPU backend, its forward
// run: the layer's input (a boundary, bf16) and the weights random, and what
// the forward saved for backward.
struct Bf16BlockForward {
  Bf16BlockForward(const ModelConfig& model, int64_t sequences)
      : config(model), allocator(HostOptions(&source)) {
    config.matmul_precision = kernels::GemmPrecision::kBf16;
    ops.SetMatmulStagingBytes(MatmulStagingBytes(config));
    context.config = &config;
    context.ops = &ops;
    context.allocator = &allocator;
    context.sequences = sequences;
    const int64_t d = config.d_model;
    x = Tensor::Create(allocator, LayerBoundaryBuffer(config, sequences))
            .value();
    kernels::cpu::ConvertToBf16(RandomFloats(tokens() * d, 1, 1.0f),
                                absl::MakeSpan(x.bf16(), tokens() * d));
    norm = RandomFloats(d, 2, 0.1f);
    for (float& weight : norm) weight += 1.0f;
    wqkv = RandomFloats(config.qkv_width() * d, 3, 0.3f);
    wo = RandomFloats(d * d, 4, 0.3f);
    std::vector<float> out(tokens() * d);
    forward = AttentionBlockForward(context, weights(), x, out.data(), &saved);
  }
  int64_t tokens() const { return context.tokens(); }
  // The block's normed input, RMSNorm(x) rounded, which the forward does
  // not keep.
  std::vector<uint16_t> Normed() {
    const int64_t n = tokens(), d = config.d_model;
    std::vector<float> x_values(n * d), inverse_rms(n);
    std::vector<uint16_t> normed(n * d);
    ops.CopyFromBf16(n * d, x.bf16(), x_values.data());
    ops.RmsNormForwardToBf16(n, d, x_values.data(), norm.data(),
                             config.rms_epsilon, normed.data(),
                             inverse_rms.data());
    return normed;
  }
  AttentionParameters<const float> weights() const {
    return {norm.data(), FloatOperand(wqkv.data()), FloatOperand(wo.data())};
  }

  ModelConfig config;
  kernels::cpu::CpuOps ops{2};
  HostMemorySource source;
  AccountedAllocator allocator;
  LayerContext context;
  Tensor x;
  std::vector<float> norm, wqkv, wo;
  AttentionActivations saved;
  absl::Status forward;
};

void ExpectBf16QkvIsTheWholeProductRotatedAndRounded(const ModelConfig& model) {
  Bf16BlockForward block(model, /*sequences=*/120);
  const ModelConfig& config = block.config;
  const int64_t n = block.tokens(), d = config.d_model;
  const int64_t width = config.qkv_width();
  // Two pieces, the second starting mid-sequence.
  ASSERT_GT(n, kQkvProductRows);
  ASSERT_NE(kQkvProductRows % config.seq_len, 0);
  ASSERT_TRUE(block.forward.ok()) << block.forward;
  kernels::Ops& ops = block.ops;
  const AttentionActivations& saved = block.saved;
  const std::vector<float>& wqkv = block.wqkv;
  ASSERT_EQ(block.x.dtype(), DType::kBfloat16);
  ASSERT_EQ(saved.qkv.dtype(), DType::kBfloat16);
  ASSERT_EQ(saved.context.dtype(), DType::kBfloat16);

  std::vector<float> product(n * width);
  const std::vector<uint16_t> normed = block.Normed();
  ops.Gemm(LinearForwardArgs(n, d, width, {nullptr, normed.data()},
                             FloatOperand(wqkv.data()), product.data(),
                             /*accumulate=*/false, config.matmul_precision));
  ops.RotaryForward(n, /*first_row=*/0, config.seq_len,
                    config.heads + config.kv_heads, config.head_dim(), width,
                    config.rope_theta, product.data());
  std::vector<uint16_t> expected(n * width);
  kernels::cpu::ConvertToBf16(product, absl::MakeSpan(expected));
  const std::vector<uint16_t> actual(saved.qkv.bf16(),
                                     saved.qkv.bf16() + n * width);
  EXPECT_EQ(actual, expected);
}

TEST(AttentionBlockTest, Bf16QkvIsTheWholeProductRotatedAndRounded) {
  ExpectBf16QkvIsTheWholeProductRotatedAndRounded(TinyModelConfig());
}

TEST(AttentionBlockTest,
     GroupedQueryBf16QkvIsTheWholeProductRotatedAndRounded) {
  ExpectBf16QkvIsTheWholeProductRotatedAndRounded(
      TinyGroupedQueryModelConfig());
}

// Under bf16 the backward makes q, k and v's float32 gradients a piece of
// the key and value heads at a time and rounds each piece into the bf16
// d_qkv, over the piece's own columns of the saved q, k and v. That is
// bitwise the whole float32 gradient, rotated back, through the QKV
// projection's products (which round their operands alike), and attention
// holds a quarter of that float32 gradient beside q, k and v, and no
// d_qkv of its own: here four key and value heads, one a piece, with one
// query head each and with two (grouped-query).
class AttentionBf16PiecesTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionBf16PiecesTest, Bf16BackwardInPiecesIsTheWholeGradientRounded) {
  ModelConfig model = TinyModelConfig();
  model.kv_heads = 4;
  model.heads = model.kv_heads * GetParam();
  model.d_model = model.heads * 4;
  const int64_t sequences = 3;
  Bf16BlockForward block(model, sequences);
  ASSERT_TRUE(block.forward.ok()) << block.forward;
  const ModelConfig& config = block.config;
  const int64_t n = block.tokens(), d = config.d_model;
  const int64_t width = config.qkv_width();
  const AttentionBuffers buffers = AttentionBuffers::For(config, sequences);
  ASSERT_EQ(buffers.piece_kv_heads, 1);
  EXPECT_EQ(4 * buffers.d_qkv_piece.bytes(), n * width * int64_t{4});
  kernels::Ops& ops = block.ops;
  AttentionActivations& saved = block.saved;
  const std::vector<float>& wqkv = block.wqkv;
  const std::vector<float>& wo = block.wo;
  // What the reference reads, before the backward consumes it.
  const std::vector<uint16_t> qkv(saved.qkv.bf16(),
                                  saved.qkv.bf16() + n * width);
  const std::vector<uint16_t> attention_out(saved.context.bf16(),
                                            saved.context.bf16() + n * d);
  const std::vector<float> logsumexp(
      saved.logsumexp.f32(),
      saved.logsumexp.f32() + saved.logsumexp.elements());
  const std::vector<uint16_t> normed = block.Normed();

  // The residual stream's gradient is bf16 under bf16: the reference
  // starts from its values.
  const Bf16Bits dout_bits = RoundedToBf16(RandomFloats(n * d, 5, 1.0f));
  const std::vector<float> dout = WidenedFromBf16(dout_bits.data(), n * d);
  Tensor gradient =
      Tensor::Create(block.allocator, ResidualGradientBuffer(config, sequences))
          .value();
  ASSERT_EQ(gradient.dtype(), DType::kBfloat16);
  std::copy(dout_bits.begin(), dout_bits.end(), gradient.bf16());
  std::vector<float> d_norm(d), d_wqkv(width * d), d_wo(d * d);
  block.allocator.ResetPeaks();
  ASSERT_TRUE(
      AttentionBlockBackward(block.context, block.weights(),
                             {d_norm.data(), d_wqkv.data(), d_wo.data()},
                             block.x, &saved, &gradient)
          .ok());
  EXPECT_EQ(
      block.allocator.Usage(MemoryPool::kDevice, MemoryComponent::kAttention)
          .peak_bytes,
      buffers.qkv.bytes() + buffers.context.bytes() +
          buffers.logsumexp.bytes() + buffers.d_qkv_piece.bytes());

  // The reference: the whole float32 d_qkv, rotated back, into the products.
  std::vector<float> d_context(n * d);
  ops.Gemm(LinearInputGradArgs(n, d, d, FloatOperand(dout.data()),
                               FloatOperand(wo.data()), d_context.data(),
                               /*accumulate=*/false, config.matmul_precision));
  kernels::AttentionShape shape;
  shape.batch = sequences;
  shape.seq_len = config.seq_len;
  shape.heads = config.heads;
  shape.kv_heads = config.kv_heads;
  shape.head_dim = config.head_dim();
  std::vector<float> d_qkv(n * width);
  const int64_t key_column = d, value_column = d + config.kv_width();
  ops.AttentionBackwardBf16(
      shape, qkv.data(), qkv.data() + key_column, qkv.data() + value_column,
      width, attention_out.data(), d_context.data(), d, logsumexp.data(),
      d_qkv.data(), d_qkv.data() + key_column, d_qkv.data() + value_column);
  ops.RotaryBackward(n, /*first_row=*/0, config.seq_len,
                     config.heads + config.kv_heads, config.head_dim(), width,
                     config.rope_theta, d_qkv.data());
  std::vector<float> expected_d_wqkv(width * d);
  ops.Gemm(LinearWeightGradArgs(
      n, d, width, FloatOperand(d_qkv.data()), {nullptr, normed.data()},
      expected_d_wqkv.data(), config.matmul_precision));
  EXPECT_EQ(d_wqkv, expected_d_wqkv);
  std::vector<float> d_normed(n * d);
  ops.Gemm(LinearInputGradArgs(n, d, width, FloatOperand(d_qkv.data()),
                               FloatOperand(wqkv.data()), d_normed.data(),
                               /*accumulate=*/false, config.matmul_precision));
  std::vector<float> x_values(n * d), expected_gradient = dout,
                                      expected_d_norm(d);
  ops.CopyFromBf16(n * d, block.x.bf16(), x_values.data());
  ops.RmsNormBackward(n, d, x_values.data(), block.norm.data(),
                      saved.inverse_rms.f32(), d_normed.data(),
                      expected_gradient.data(), expected_d_norm.data());
  EXPECT_EQ(BitsOf(gradient), RoundedToBf16(expected_gradient));
  EXPECT_EQ(d_norm, expected_d_norm);
}

INSTANTIATE_TEST_SUITE_P(QueryHeadsPerKeyValueHead, AttentionBf16PiecesTest,
                         ::testing::Values(1, 2));

}  // namespace
}  // namespace plateau::engine
