// The optimizers' set-up against their footprints: each optimizer, resident
// and offloaded (with the device's product weights and gradients in bf16
// too), over one ZeRO-1 shard of a model, must allocate the
// buffers its footprint names and reach the same peaks, and put as many
// elements in a checkpoint as its footprint says.
#include "engine/optim/optimizer_footprint.h"

#include <string>
#include <vector>

#include "engine/memory/footprint_testing.h"
#include "engine/memory/tensor.h"
#include "engine/model/model_footprint.h"
#include "engine/model/split_buffers.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/tiered_optimizer.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

struct Case {
  const char* name;
  bool tiered = false;
  TieredKind kind = TieredKind::kSkewAdam;
  MomentumStorage expert_momentum = MomentumStorage::kNone;
  OptimizerOffload offload = OptimizerOffload::kNone;
  // With offload under bf16 products: the device's product weights in bf16
  // (the masters written back through staging), and their gradients too
  // (fetched through a host slot).
  bool bf16_weight_storage = false;
  bool bf16_gradients = false;
};

class OptimizerFootprintTest : public ::testing::TestWithParam<Case> {
 protected:
  OptimizerFootprintTest() : ops_(1), allocator_(Options()) {
    config_.layers = 2;
    config_.d_model = 16;
    config_.heads = 2;
    config_.kv_heads = 2;
    config_.experts = 4;
    config_.top_k = 2;
    config_.ffn_hidden = 12;
    config_.vocab = 23;
    config_.seq_len = 8;
  }

  AccountedAllocator::Options Options() {
    AccountedAllocator::Options options;
    options.device_source = &source_;
    options.host_source = &source_;
    options.observer = &observer_;
    return options;
  }

  ModelConfig config_;
  HostMemorySource source_;
  RecordingObserver observer_;
  kernels::cpu::CpuOps ops_;
  AccountedAllocator allocator_;
};

// What a rank sends of its state to a checkpoint.
int64_t CheckpointedElements(const std::vector<TensorPiece>& pieces) {
  int64_t elements = 0;
  for (const TensorPiece& piece : pieces) {
    if (!piece.replica) elements += piece.elements;
  }
  return elements;
}

TEST_P(OptimizerFootprintTest, SetUpAllocatesItsFootprint) {
  ModelConfig config = config_;
  if (GetParam().bf16_weight_storage) {
    config.matmul_precision = kernels::GemmPrecision::kBf16;
    config.bf16_weight_storage = true;
    config.bf16_gradients = GetParam().bf16_gradients;
  }
  // The second of two replicas' shards (a layout padded for them).
  ModelShard shard = ModelShard::Whole(config);
  shard.dense_alignment = 2;
  shard.expert_alignment = 2;
  const ParameterLayout layout(config, shard);
  const std::vector<OwnedRange> owned =
      OwnedRangesOf(ZeroRegionsOf(layout, 2, 1, 2, 1));
  // The model's weights and gradients, as Model::Create makes them.
  const ModelStateBuffers state = ModelStateBuffers::For(layout);
  Tensor weights = Tensor::Create(allocator_, state.weights).value();
  Tensor gradients = Tensor::Create(allocator_, state.gradients).value();
  Tensor bf16_weights, bf16_gradients;
  SplitBuffers weight_buffers = AllFloat32(&weights);
  SplitBuffers gradient_buffers = AllFloat32(&gradients);
  if (state.bf16_weights) {
    bf16_weights = Tensor::Create(allocator_, *state.bf16_weights).value();
    weight_buffers = {&weights, &bf16_weights, layout.bf16_begin()};
  }
  if (state.bf16_gradients) {
    bf16_gradients = Tensor::Create(allocator_, *state.bf16_gradients).value();
    gradient_buffers = {&gradients, &bf16_gradients, layout.bf16_begin()};
  }
  ops_.Fill(weights.elements(), 0.0f, weights.f32());

  RecordingSink footprint;
  observer_.recording = true;
  if (GetParam().tiered) {
    TieredSettings settings;
    settings.kind = GetParam().kind;
    settings.expert_momentum = GetParam().expert_momentum;
    settings.offload = GetParam().offload;
    auto optimizer = TieredOptimizer::Create(
        settings, &layout, owned, nullptr, nullptr, weight_buffers,
        gradient_buffers, &ops_, &allocator_);
    observer_.recording = false;
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    TieredSetUpFootprint(
        TieredStateBuffers::For(TieredState::For(layout, owned, settings.kind,
                                                 settings.expert_momentum),
                                settings.offload != OptimizerOffload::kNone,
                                {false, false}),
        footprint);
    EXPECT_EQ(
        CheckpointedElements((*optimizer)->StatePieces()),
        TieredCheckpointElements(TieredState::For(layout, owned, settings.kind,
                                                  settings.expert_momentum),
                                 {true, true}));
  } else {
    AdamWSettings settings;
    settings.offload = GetParam().offload;
    auto optimizer =
        AdamWOptimizer::Create(settings, &layout, owned, weight_buffers,
                               gradient_buffers, &ops_, &allocator_);
    observer_.recording = false;
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    AdamWSetUpFootprint(AdamWState::For(layout, owned, settings.offload,
                                        settings.bucket_elements),
                        footprint);
    EXPECT_EQ(CheckpointedElements((*optimizer)->StatePieces()),
              AdamWCheckpointElements(AdamWState::For(
                  layout, owned, settings.offload, settings.bucket_elements)));
  }
  ASSERT_FALSE(footprint.events.empty());
  ExpectSameFootprint(observer_.events, footprint.events);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, OptimizerFootprintTest,
    ::testing::Values(
        Case{"adamw"},
        Case{"adamw_stream", false, TieredKind::kSkewAdam,
             MomentumStorage::kNone, OptimizerOffload::kStream},
        Case{"adamw_serial", false, TieredKind::kSkewAdam,
             MomentumStorage::kNone, OptimizerOffload::kSerial},
        Case{"skewadam", true},
        Case{"skewadam_bfloat16_experts", true, TieredKind::kSkewAdam,
             MomentumStorage::kBfloat16},
        Case{"skewadam_offload", true, TieredKind::kSkewAdam,
             MomentumStorage::kFloat32, OptimizerOffload::kStream},
        Case{"adafactor", true, TieredKind::kAdafactor},
        Case{"lion", true, TieredKind::kLion},
        Case{"adamw_stream_bf16_storage", false, TieredKind::kSkewAdam,
             MomentumStorage::kNone, OptimizerOffload::kStream, true},
        Case{"adamw_serial_bf16_gradients", false, TieredKind::kSkewAdam,
             MomentumStorage::kNone, OptimizerOffload::kSerial, true, true},
        Case{"skewadam_offload_bf16_storage", true, TieredKind::kSkewAdam,
             MomentumStorage::kBfloat16, OptimizerOffload::kStream, true},
        Case{"skewadam_offload_bf16_gradients", true, TieredKind::kSkewAdam,
             MomentumStorage::kBfloat16, OptimizerOffload::kStream, true, true},
        Case{"lion_offload_bf16_gradients", true, TieredKind::kLion,
             MomentumStorage::kNone, OptimizerOffload::kSerial, true, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace plateau::engine
