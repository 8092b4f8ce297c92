// The attention block's bf16 q, k, v: made a piece of kQkvProductRows rows
// at a time, each piece rotated from its own rows' positions and rounded
// once, they are the whole product's, rotated and rounded. With grouped-query
// attention too, whose rows are narrower (fewer key and value heads).
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

}  // namespace
}  // namespace plateau::engine
