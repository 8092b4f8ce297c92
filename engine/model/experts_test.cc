// The experts' bf16 outputs: made a piece of kExpertOutputPieceRows rows at
// a time, each segment's rows in a piece a product of their own, they are
// the whole product of every segment, rounded once.
#include "engine/model/experts.h"

#include <random>
#include <vector>

#include "engine/backend.h"
#include "engine/model/linear.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16.h"

namespace plateau::engine {
namespace {

std::vector<float> RandomFloats(int64_t count, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

TEST(ExpertsTest, Bf16OutputIsEverySegmentsWholeProductRounded) {
  ModelConfig config = TinyModelConfig();
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  const int64_t d = config.d_model, f = config.ffn_hidden;
  const int64_t experts = config.experts;
  // Segments of uneven sizes, one of them empty and one longer than a piece,
  // from two sources: pieces start mid-segment and end mid-segment.
  std::vector<ExpertSegment> segments;
  int64_t rows = 0;
  const std::vector<int64_t> sizes = {700, 0, 1500, 31, 333, 900};
  for (size_t i = 0; i < sizes.size(); ++i) {
    segments.push_back({static_cast<int>(i / experts),
                        static_cast<int64_t>(i) % experts, rows, sizes[i]});
    rows += sizes[i];
  }
  ASSERT_GT(rows, 2 * kExpertOutputPieceRows);

  std::unique_ptr<Backend> backend =
      Backend::CreateCpu(2, AccountedAllocator::kUnlimited);
  kernels::Ops& ops = backend->ops();
  ops.SetMatmulStagingBytes(MatmulStagingBytes(config));
  LayerContext context;
  context.config = &config;
  context.ops = &ops;
  context.allocator = &backend->allocator();
  context.sequences = 1;

  const std::vector<float> w1 = RandomFloats(experts * f * d, 1);
  const std::vector<float> w3 = RandomFloats(experts * f * d, 2);
  const std::vector<float> w2 = RandomFloats(experts * d * f, 3);
  absl::StatusOr<Tensor> input =
      Tensor::Create(backend->allocator(), ExpertInputRowsBuffer(config, rows));
  ASSERT_TRUE(input.ok()) << input.status();
  ASSERT_EQ(input->dtype(), DType::kBfloat16);
  kernels::cpu::ConvertToBf16(RandomFloats(rows * d, 4),
                              absl::MakeSpan(input->bf16(), rows * d));

  ExpertActivations saved;
  absl::StatusOr<Tensor> output =
      ExpertsForward(context, {{w1.data(), w3.data(), w2.data()}, {}}, segments,
                     *input, &saved);
  ASSERT_TRUE(output.ok()) << output.status();
  ASSERT_EQ(output->dtype(), DType::kBfloat16);

  std::vector<float> product(rows * d);
  for (const ExpertSegment& segment : segments) {
    if (segment.rows == 0) continue;
    ops.Gemm(LinearForwardArgs(
        segment.rows, f, d, RowsOf(saved.hidden, segment.first_row),
        FloatOperand(w2.data() + segment.local_expert * d * f),
        product.data() + segment.first_row * d,
        /*accumulate=*/false, config.matmul_precision));
  }
  std::vector<uint16_t> expected(rows * d);
  kernels::cpu::ConvertToBf16(product, absl::MakeSpan(expected));
  const std::vector<uint16_t> actual(output->bf16(), output->bf16() + rows * d);
  EXPECT_EQ(actual, expected);
}

}  // namespace
}  // namespace plateau::engine
