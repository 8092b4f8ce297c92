// The attention block's bf16 q, k, v: made a piece of kQkvProductRows rows
// at a time, each piece rotated from its own rows' positions and rounded
// once, they are the whole product's, rotated and rounded. With grouped-query
// attention too, whose rows are narrower (fewer key and value heads). And
// its bf16 backward, made a piece of the heads at a time, is the whole's.
#include "engine/model/attention_block.h"

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

using testing::RandomFloats;

void ExpectBf16QkvIsTheWholeProductRotatedAndRounded(ModelConfig config) {
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  const int64_t sequences = 120;
  const int64_t n = sequences * config.seq_len, d = config.d_model;
  const int64_t width = config.qkv_width();
  // Two pieces, the second starting mid-sequence.
  ASSERT_GT(n, kQkvProductRows);
  ASSERT_NE(kQkvProductRows % config.seq_len, 0);

  kernels::cpu::CpuOps ops(2);
  ops.SetMatmulStagingBytes(MatmulStagingBytes(config));
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  AccountedAllocator allocator(options);
  LayerContext context;
  context.config = &config;
  context.ops = &ops;
  context.allocator = &allocator;
  context.sequences = sequences;

  // The layer's input, a boundary: bf16 under bf16.
  absl::StatusOr<Tensor> x =
      Tensor::Create(allocator, LayerBoundaryBuffer(config, sequences));
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_EQ(x->dtype(), DType::kBfloat16);
  kernels::cpu::ConvertToBf16(RandomFloats(n * d, 1, 1.0f),
                              absl::MakeSpan(x->bf16(), n * d));
  std::vector<float> norm = RandomFloats(d, 2, 0.1f);
  for (float& weight : norm) weight += 1.0f;
  const std::vector<float> wqkv = RandomFloats(width * d, 3, 0.3f);
  const std::vector<float> wo = RandomFloats(d * d, 4, 0.3f);
  std::vector<float> out(n * d);
  AttentionActivations saved;
  ASSERT_TRUE(AttentionBlockForward(context,
                                    {norm.data(), FloatOperand(wqkv.data()),
                                     FloatOperand(wo.data())},
                                    *x, out.data(), &saved)
                  .ok());
  ASSERT_EQ(saved.qkv.dtype(), DType::kBfloat16);
  ASSERT_EQ(saved.context.dtype(), DType::kBfloat16);

  std::vector<float> product(n * width);
  ops.Gemm(LinearForwardArgs(n, d, width, RowsOf(saved.normed),
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
// d_qkv. That is bitwise the whole float32 gradient, rotated back, through
// the QKV projection's products (which round their operands alike), and
// attention holds a quarter of that float32 gradient beside its bf16 d_qkv:
// here four key and value heads, one a piece.
TEST(AttentionBlockTest, Bf16BackwardInPiecesIsTheWholeGradientRounded) {
  ModelConfig config = TinyModelConfig();
  config.heads = config.kv_heads = 4;
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  const int64_t sequences = 3;
  const int64_t n = sequences * config.seq_len, d = config.d_model;
  const int64_t width = config.qkv_width();
  const AttentionBuffers buffers = AttentionBuffers::For(config, sequences);
  ASSERT_EQ(buffers.piece_kv_heads, 1);
  EXPECT_EQ(4 * buffers.d_qkv_piece.bytes(), n * width * int64_t{4});

  kernels::cpu::CpuOps ops(2);
  ops.SetMatmulStagingBytes(MatmulStagingBytes(config));
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  AccountedAllocator allocator(options);
  LayerContext context;
  context.config = &config;
  context.ops = &ops;
  context.allocator = &allocator;
  context.sequences = sequences;
  absl::StatusOr<Tensor> x =
      Tensor::Create(allocator, LayerBoundaryBuffer(config, sequences));
  ASSERT_TRUE(x.ok()) << x.status();
  kernels::cpu::ConvertToBf16(RandomFloats(n * d, 1, 1.0f),
                              absl::MakeSpan(x->bf16(), n * d));
  std::vector<float> norm = RandomFloats(d, 2, 0.1f);
  for (float& weight : norm) weight += 1.0f;
  const std::vector<float> wqkv = RandomFloats(width * d, 3, 0.3f);
  const std::vector<float> wo = RandomFloats(d * d, 4, 0.3f);
  const AttentionParameters<const float> w{
      norm.data(), FloatOperand(wqkv.data()), FloatOperand(wo.data())};
  std::vector<float> out(n * d);
  AttentionActivations saved;
  ASSERT_TRUE(AttentionBlockForward(context, w, *x, out.data(), &saved).ok());
  // What the reference reads, before the backward consumes it.
  const std::vector<uint16_t> qkv(saved.qkv.bf16(),
                                  saved.qkv.bf16() + n * width);
  const std::vector<uint16_t> attention_out(saved.context.bf16(),
                                            saved.context.bf16() + n * d);
  const std::vector<float> logsumexp(
      saved.logsumexp.f32(),
      saved.logsumexp.f32() + saved.logsumexp.elements());
  const std::vector<uint16_t> normed(saved.normed.bf16(),
                                     saved.normed.bf16() + n * d);

  const std::vector<float> dout = RandomFloats(n * d, 5, 1.0f);
  std::vector<float> gradient = dout;
  std::vector<float> d_norm(d), d_wqkv(width * d), d_wo(d * d);
  allocator.ResetPeaks();
  ASSERT_TRUE(AttentionBlockBackward(
                  context, w, {d_norm.data(), d_wqkv.data(), d_wo.data()}, *x,
                  &saved, gradient.data())
                  .ok());
  EXPECT_EQ(allocator.Usage(MemoryPool::kDevice, MemoryComponent::kAttention)
                .peak_bytes,
            buffers.qkv.bytes() + buffers.context.bytes() +
                buffers.logsumexp.bytes() + buffers.d_qkv.bytes() +
                buffers.d_qkv_piece.bytes());

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
  ops.CopyFromBf16(n * d, x->bf16(), x_values.data());
  ops.RmsNormBackward(n, d, x_values.data(), norm.data(),
                      saved.inverse_rms.f32(), d_normed.data(),
                      expected_gradient.data(), expected_d_norm.data());
  EXPECT_EQ(gradient, expected_gradient);
  EXPECT_EQ(d_norm, expected_d_norm);
}

}  // namespace
}  // namespace plateau::engine
