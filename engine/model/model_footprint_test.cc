// Every block's footprint against the allocations the block really makes:
// a model's micro-batch, forward and backward, with each schedule and both
// heads, and a validation pass, run on the CPU backend with an observer on
// the allocator, must allocate the same buffers as its footprint and reach
// the same peak in every pool and component. A block that allocates a
// buffer its footprint does not name fails here. In bf16 too, where the
// activations only products read are bf16 (ProductInputType), with the
// product weights stored in bf16 and their gradients too, and with
// grouped-query attention, whose k and v are narrower.
#include "engine/model/model_footprint.h"

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/memory/accounted_scratch_arena.h"
#include "engine/memory/footprint_testing.h"
#include "engine/model/attention_footprint.h"
#include "engine/model/model.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/output_head_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

struct Schedule {
  const char* name;
  bool activation_checkpointing = false;
  bool offload_checkpoints = false;
  int64_t dispatch_chunk_tokens = 0;
  int64_t vocab_block = 0;
  kernels::GemmPrecision precision = kernels::GemmPrecision::kFloat32;
  // Not a schedule: the model, with the options whose buffers it tests
  // (tiny_model_config.h).
  ModelConfig (*model)() = TinyModelConfig;
  // What an offloaded optimizer lets the device keep in bf16 only: the
  // product weights (no per-pass copies), and their gradients (a float32
  // window a pass).
  bool bf16_weight_storage = false;
  bool bf16_gradients = false;
};

class ModelFootprintTest : public ::testing::TestWithParam<Schedule> {
 protected:
  ModelFootprintTest() : ops_(2), allocator_(Options()) {}

  AccountedAllocator::Options Options() {
    AccountedAllocator::Options options;
    options.device_source = &source_;
    options.host_source = &source_;
    options.observer = &recorder_;
    return options;
  }

  ModelConfig Config() const {
    ModelConfig config = GetParam().model();
    config.activation_checkpointing = GetParam().activation_checkpointing;
    config.offload_checkpoints = GetParam().offload_checkpoints;
    config.dispatch_chunk_tokens = GetParam().dispatch_chunk_tokens;
    config.vocab_block = GetParam().vocab_block;
    config.matmul_precision = GetParam().precision;
    config.bf16_weight_storage = GetParam().bf16_weight_storage;
    config.bf16_gradients = GetParam().bf16_gradients;
    return config;
  }

  std::vector<int32_t> Tokens(const ModelConfig& config, int64_t sequences) {
    std::mt19937 rng(7);
    std::vector<int32_t> tokens(sequences * (config.seq_len + 1));
    for (int32_t& token : tokens) {
      token = static_cast<int32_t>(rng() % config.vocab);
    }
    return tokens;
  }

  // The pass the model just made: its routing's counts, exactly.
  static PassShape PassOf(const ModelConfig& config, const Model& model,
                          int64_t sequences) {
    PassShape pass;
    pass.sequences = sequences;
    pass.head.group_tokens = {sequences * config.seq_len};
    for (const std::vector<int64_t>& counts : model.expert_tokens()) {
      pass.dispatch.push_back(DispatchShapeOf(
          config, /*ranks=*/1, /*self=*/0, counts, ChunkRows::kExact,
          /*max_chunks=*/std::numeric_limits<int64_t>::max()));
    }
    return pass;
  }

  HostMemorySource source_;
  RecordingObserver recorder_;
  kernels::cpu::CpuOps ops_;
  AccountedAllocator allocator_;
};

TEST_P(ModelFootprintTest, TrainingMicroBatchAllocatesItsFootprint) {
  const ModelConfig config = Config();
  const int64_t sequences = 3;
  auto model = Model::Create(config, &ops_, &allocator_);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->InitializeWeights(5).ok());
  const std::vector<int32_t> tokens = Tokens(config, sequences);
  recorder_.recording = true;
  auto loss = (*model)->ForwardBackward(tokens.data(), sequences);
  recorder_.recording = false;
  ASSERT_TRUE(loss.ok()) << loss.status();

  const PassShape pass = PassOf(config, **model, sequences);
  RecordingSink sink;
  ModelFootprint footprint(config, ModelShard::Whole(config), &sink);
  EXPECT_EQ(footprint.Forward(0, pass, /*input=*/0), 0);
  EXPECT_EQ(footprint.Backward(0, /*output_gradient=*/0), 0);
  ExpectSameFootprint(recorder_.events, sink.events);

  // The comparison can fail: a pass of one sequence fewer is told apart.
  PassShape shorter = pass;
  shorter.sequences = sequences - 1;
  RecordingSink other;
  ModelFootprint other_footprint(config, ModelShard::Whole(config), &other);
  other_footprint.Forward(0, shorter, 0);
  other_footprint.Backward(0, 0);
  EXPECT_NE(Summarise(recorder_.events).allocations,
            Summarise(other.events).allocations);
}

TEST_P(ModelFootprintTest, ValidationPassAllocatesItsFootprint) {
  const ModelConfig config = Config();
  const int64_t sequences = 2;
  auto model = Model::CreateForEvaluation(config, &ops_, &allocator_);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->InitializeWeights(5).ok());
  const std::vector<int32_t> tokens = Tokens(config, sequences);
  recorder_.recording = true;
  auto output = (*model)->EvaluateStage(tokens.data(), sequences, Tensor());
  recorder_.recording = false;
  ASSERT_TRUE(output.ok()) << output.status();

  RecordingSink sink;
  ModelFootprint footprint(config, ModelShard::Whole(config), &sink);
  footprint.Evaluate(PassOf(config, **model, sequences), /*input=*/0);
  ExpectSameFootprint(recorder_.events, sink.events);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ModelFootprintTest,
    ::testing::Values(
        Schedule{"plain"}, Schedule{"activation_checkpointing", true},
        Schedule{"checkpoint_offload", true, true},
        Schedule{"chunked_dispatch", false, false, 5},
        Schedule{"ring_vocabulary", false, false, 0, 7},
        Schedule{"every_schedule", true, true, 5, 7},
        Schedule{"plain_bf16", false, false, 0, 0,
                 kernels::GemmPrecision::kBf16},
        Schedule{"every_schedule_bf16", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16},
        // Model options: narrower k and v; a logsumexp a token kept for
        // the z-loss; QK-norm's input made again in backward; the sigmoid
        // router's score sums and the expert bias; the shared experts'
        // pieces and their weights' bf16 copy; the head's bf16 copy made
        // from the embedding's rows.
        Schedule{"grouped_query", false, false, 0, 0,
                 kernels::GemmPrecision::kFloat32, TinyGroupedQueryModelConfig},
        Schedule{"every_schedule_grouped_query_bf16", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16, TinyGroupedQueryModelConfig},
        Schedule{"z_loss", false, false, 0, 0, kernels::GemmPrecision::kFloat32,
                 TinyZLossModelConfig},
        Schedule{"every_schedule_z_loss_bf16", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16, TinyZLossModelConfig},
        Schedule{"qk_norm", false, false, 0, 0,
                 kernels::GemmPrecision::kFloat32, TinyQkNormModelConfig},
        Schedule{"every_schedule_qk_norm_bf16", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16, TinyQkNormModelConfig},
        Schedule{"sigmoid_router_expert_bias", false, false, 0, 0,
                 kernels::GemmPrecision::kFloat32,
                 TinySigmoidRouterModelConfig},
        Schedule{"every_schedule_sigmoid_router_expert_bias_bf16", true, true,
                 5, 7, kernels::GemmPrecision::kBf16,
                 TinySigmoidRouterModelConfig},
        Schedule{"shared_experts", false, false, 0, 0,
                 kernels::GemmPrecision::kFloat32,
                 TinySharedExpertsModelConfig},
        Schedule{"every_schedule_shared_experts_bf16", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16, TinySharedExpertsModelConfig},
        Schedule{"every_schedule_tied_embeddings_bf16", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16, TinyTiedEmbeddingsModelConfig},
        // bf16 weight storage, then bf16 gradients too: the layers' and
        // head's windows, the shared experts' in the layer's, and a tied
        // head's float32 rows.
        Schedule{"plain_bf16_storage", false, false, 0, 0,
                 kernels::GemmPrecision::kBf16, TinyModelConfig, true},
        Schedule{"every_schedule_bf16_storage", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16, TinyModelConfig, true},
        Schedule{"plain_bf16_gradients", false, false, 0, 0,
                 kernels::GemmPrecision::kBf16, TinyModelConfig, true, true},
        Schedule{"every_schedule_bf16_gradients", true, true, 5, 7,
                 kernels::GemmPrecision::kBf16, TinyModelConfig, true, true},
        Schedule{"every_schedule_shared_experts_bf16_gradients", true, true, 5,
                 7, kernels::GemmPrecision::kBf16, TinySharedExpertsModelConfig,
                 true, true},
        Schedule{"every_schedule_tied_embeddings_bf16_gradients", true, true, 5,
                 7, kernels::GemmPrecision::kBf16,
                 TinyTiedEmbeddingsModelConfig, true, true}),
    [](const ::testing::TestParamInfo<Schedule>& info) {
      return std::string(info.param.name);
    });

// Under bf16 the buffers only products read take half the bytes (the
// experts' output gradients among them), and so do
// attention's q, k, v and output, the layers' inputs, the experts'
// pre-activations and outputs, the logits and the residual stream's
// gradient (RoundedActivationType), and only they: every other buffer (the
// parameters' gradients, the residual inside a layer) stays float32.
TEST(ProductInputTypeTest, Bf16HalvesTheBuffersOnlyProductsRead) {
  ModelConfig fp32 = TinyModelConfig();
  ModelConfig bf16 = fp32;
  bf16.matmul_precision = kernels::GemmPrecision::kBf16;
  EXPECT_EQ(ProductInputType(fp32), DType::kFloat32);
  EXPECT_EQ(ProductInputType(bf16), DType::kBfloat16);
  const auto expect_ratio = [](const BufferSpec& fp32_spec,
                               const BufferSpec& bf16_spec, int64_t ratio,
                               const char* what) {
    EXPECT_EQ(fp32_spec.bytes(), ratio * bf16_spec.bytes()) << what;
    EXPECT_EQ(fp32_spec.component, bf16_spec.component) << what;
  };
  const int64_t sequences = 2, rows = 37;
  const AttentionBuffers attention_fp32 =
      AttentionBuffers::For(fp32, sequences);
  const AttentionBuffers attention_bf16 =
      AttentionBuffers::For(bf16, sequences);
  expect_ratio(attention_fp32.normed, attention_bf16.normed, 2,
               "attention normed");
  EXPECT_EQ(RoundedActivationType(fp32), DType::kFloat32);
  EXPECT_EQ(RoundedActivationType(bf16), DType::kBfloat16);
  expect_ratio(attention_fp32.qkv, attention_bf16.qkv, 2, "qkv");
  expect_ratio(attention_fp32.context, attention_bf16.context, 2, "context");
  // bf16's q, k, v are rounded from a float32 product, fp32's are that.
  EXPECT_FALSE(attention_fp32.rounds_qkv());
  EXPECT_TRUE(attention_bf16.rounds_qkv());
  // A float32 piece of at most kQkvProductRows rows of it.
  EXPECT_EQ(attention_bf16.qkv_product.bytes(), attention_fp32.qkv.bytes());
  EXPECT_EQ(AttentionBuffers::For(bf16, 1000).qkv_product.bytes(),
            kQkvProductRows * 3 * bf16.d_model * int64_t{sizeof(float)});
  expect_ratio(ExpertInputRowsBuffer(fp32, rows),
               ExpertInputRowsBuffer(bf16, rows), 2, "expert input rows");
  expect_ratio(ExpertOutputRowsBuffer(fp32, rows),
               ExpertOutputRowsBuffer(bf16, rows), 2, "expert output rows");
  expect_ratio(ExpertOutputGradientRowsBuffer(fp32, rows),
               ExpertOutputGradientRowsBuffer(bf16, rows), 2,
               "expert output rows' gradients, sent to the experts");
  expect_ratio(DispatchRowsBuffer(fp32, rows), DispatchRowsBuffer(bf16, rows),
               1, "expert rows' other gradients");
  const ExpertBuffers experts_fp32 = ExpertBuffers::For(fp32, rows);
  const ExpertBuffers experts_bf16 = ExpertBuffers::For(bf16, rows);
  expect_ratio(experts_fp32.hidden, experts_bf16.hidden, 2, "expert hidden");
  expect_ratio(experts_fp32.output, experts_bf16.output, 2, "expert output");
  expect_ratio(experts_fp32.gate, experts_bf16.gate, 2, "expert gate");
  expect_ratio(experts_fp32.up, experts_bf16.up, 2, "expert up");
  EXPECT_FALSE(experts_fp32.rounds());
  EXPECT_TRUE(experts_bf16.rounds());
  expect_ratio(experts_fp32.d_hidden, experts_bf16.d_hidden, 1, "d_hidden");
  expect_ratio(OutputHeadBuffers::For(fp32, sequences).normed,
               OutputHeadBuffers::For(bf16, sequences).normed, 2,
               "head normed");
  const OutputHeadBuffers head_fp32 = OutputHeadBuffers::For(fp32, sequences);
  const OutputHeadBuffers head_bf16 = OutputHeadBuffers::For(bf16, sequences);
  expect_ratio(head_fp32.logits, head_bf16.logits, 2, "logits");
  ModelConfig ring_fp32 = fp32, ring_bf16 = bf16;
  ring_fp32.vocab_block = ring_bf16.vocab_block = 7;
  expect_ratio(RingLogitsBuffer(ring_fp32, rows),
               RingLogitsBuffer(ring_bf16, rows), 2,
               "Ring-DTP block of logits");
  expect_ratio(RingTokenBuffers::For(fp32, rows).hidden,
               RingTokenBuffers::For(bf16, rows).hidden, 2,
               "Ring-DTP hidden block");
  expect_ratio(RingTokenBuffers::For(fp32, rows).hidden_gradient,
               RingTokenBuffers::For(bf16, rows).hidden_gradient, 1,
               "Ring-DTP hidden gradient");
  expect_ratio(RingShardBuffer(fp32, rows), RingShardBuffer(bf16, rows), 2,
               "Ring-DTP weight shard (its bf16 copy travels)");
  expect_ratio(RingShardGradientBuffer(fp32, rows),
               RingShardGradientBuffer(bf16, rows), 1,
               "Ring-DTP weight shard gradient");
  expect_ratio(MoeBuffers::For(fp32, sequences).normed,
               MoeBuffers::For(bf16, sequences).normed, 2,
               "MoE normed (the router reads its rows made again)");
  expect_ratio(LayerBoundaryBuffer(fp32, sequences),
               LayerBoundaryBuffer(bf16, sequences), 2,
               "a layer's input or output kept");
  expect_ratio(LayerBoundaryBuffer(fp32, sequences, MemoryPool::kHost),
               LayerBoundaryBuffer(bf16, sequences, MemoryPool::kHost), 2,
               "a layer's input offloaded (SCO)");
  expect_ratio(BoundaryActivationsBuffer(fp32, sequences),
               BoundaryActivationsBuffer(bf16, sequences), 2,
               "a stage's output sent to the next");
  expect_ratio(ResidualStreamBuffer(fp32, sequences),
               ResidualStreamBuffer(bf16, sequences), 1,
               "the residual inside a layer");
  expect_ratio(ResidualGradientBuffer(fp32, sequences),
               ResidualGradientBuffer(bf16, sequences), 2,
               "the residual stream's gradient");
}

// What the CPU backend's scratch holds after a bf16 embedding backward is
// EmbeddingSortScratchBytes: here 300,000 tokens a micro-batch, whose sort
// (1.2 MB, two whole MiBs) outgrows the tiny model's staging.
TEST(EmbeddingSortScratchTest, IsWhatTheCpuBackwardReserves) {
  ModelConfig config = TinyModelConfig();
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  config.bf16_weight_storage = true;
  config.bf16_gradients = true;
  config.seq_len = 100000;
  const int64_t sequences = 3;
  const int64_t tokens = sequences * config.seq_len;
  const int64_t dim = 2;
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  AccountedAllocator allocator(options);
  AccountedScratchArena scratch(&allocator, MemoryPool::kDevice,
                                MemoryComponent::kOther);
  kernels::cpu::CpuOps ops(2, &scratch);
  std::vector<int32_t> ids(tokens);
  for (int64_t t = 0; t < tokens; ++t) ids[t] = (t * 7) % config.vocab;
  const std::vector<uint16_t> dout(tokens * dim, 0x3f80);  // 1.0 in bf16
  std::vector<uint16_t> table(config.vocab * dim, 0);
  ops.EmbeddingBackwardBf16(tokens, dim, ids.data(), dout.data(), table.data());
  ASSERT_TRUE(ops.status().ok()) << ops.status();
  const ModelShard whole = ModelShard::Whole(config);
  EXPECT_EQ(scratch.reserved_bytes(),
            EmbeddingSortScratchBytes(config, whole, sequences));
  EXPECT_EQ(scratch.reserved_bytes(), int64_t{2} << 20);
  EXPECT_GT(scratch.reserved_bytes(), MatmulStagingBytes(config));
  // No sort without bf16 gradients, or on a stage without the embedding.
  ModelShard later_stage = whole;
  later_stage.has_embedding = false;
  EXPECT_EQ(EmbeddingSortScratchBytes(config, later_stage, sequences), 0);
  config.bf16_gradients = false;
  EXPECT_EQ(EmbeddingSortScratchBytes(config, whole, sequences), 0);
}

}  // namespace
}  // namespace plateau::engine
